"""What a KAI conformance suite is told, and the names every KAI suite module shares: KAI's
API group and the label that marks what a suite created.

Suite parameters (``ctx.params``, all optional): ``kai_namespace`` (kai-scheduler),
``scheduler_name`` (kai-scheduler), ``queue_label_key`` (kai.scheduler/queue),
``reservation_namespace`` (kai-resource-reservation), ``workload_image`` (the pause image),
``preemptible_class`` (train), ``non_preemptible_class`` (inference), ``wait_seconds`` (120,
one wait, times ``ctx.timeout_scale``), ``settle_seconds`` (8: how long "stays pending" is
watched, times ``ctx.timeout_scale``).

Called by ``kai.suite``, ``kai.preflight``, ``kai.workspace``, ``kai.pods`` and the KAI suites.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpucatalog.validators.conformance.kit import base

GROUP = "scheduling.run.ai"
# KAI's label on a fraction pod and on the reservation pod holding its shared GPU.
GPU_GROUP_LABEL = "runai-gpu-group"


@dataclass(frozen=True)
class Params:
    kai_namespace: str = "kai-scheduler"
    scheduler_name: str = "kai-scheduler"
    queue_label_key: str = "kai.scheduler/queue"
    reservation_namespace: str = "kai-resource-reservation"
    workload_image: str = "registry.k8s.io/pause:3.10"
    preemptible_class: str = "train"
    non_preemptible_class: str = "inference"
    wait_seconds: float = 120.0
    settle_seconds: float = 8.0
    namespace_prefix: str = "conformance"

    @classmethod
    def from_ctx(cls, ctx: base.SuiteContext) -> Params:
        known = {k: v for k, v in ctx.params.items() if k in cls.__dataclass_fields__}
        p = cls(**known)
        return cls(**{**p.__dict__, "wait_seconds": ctx.scaled(p.wait_seconds),
                      "settle_seconds": ctx.scaled(p.settle_seconds), "namespace_prefix": ctx.namespace_prefix})
