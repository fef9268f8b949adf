"""Kueue's side of the queueing contract (``queueing.contract``): its preflight, the watchdog
that turns a crash or kill of Kueue's controller manager during a case into that case's cause,
what the contract cannot ask of it, and its per-case spaces (:mod:`.space`).

Suite parameters (``ctx.params``, all optional): ``kueue_namespace`` (kueue-system),
``workload_image``, ``preemptible_class`` (train), ``non_preemptible_class`` (inference),
``wait_seconds`` (120) and ``settle_seconds`` (8), both times ``ctx.timeout_scale``, ``run_for``
(how long the sim keeps a Job pod running), ``borrowing_limit`` and ``cluster_queue_overrides``
(misconfigurations that show the contract failing; see ``kueue_space.KueueParams``).

Called by ``quota_reclaim`` and ``gang`` (through ``queueing_contract.run``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml
from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client
from gpucatalog.validators.conformance.kueue import space as kueue_space

DEPLOYMENT = "kueue-controller-manager"
CONFIG_MAP = "kueue-manager-config"
SELECTOR = "app.kubernetes.io/name=kueue,control-plane=controller-manager"
CRDS = ("resourceflavors", "cohorts", "clusterqueues", "localqueues", "workloads")


def params_from(ctx: base.SuiteContext) -> kueue_space.KueueParams:
    fields = kueue_space.KueueParams.__dataclass_fields__
    known = {k: v for k, v in ctx.params.items() if k in fields}
    p = kueue_space.KueueParams(**known)
    return kueue_space.KueueParams(**{**p.__dict__, "wait_seconds": ctx.scaled(p.wait_seconds),
                                      "settle_seconds": ctx.scaled(p.settle_seconds),
                                      "namespace_prefix": ctx.namespace_prefix})


class Watchdog:
    """Fails a wait when Kueue's manager pod restarts, is replaced, or has no ready pod."""

    def __init__(self, kube: kube_client.Kube, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.baseline = self._pods()

    def _pods(self) -> dict[str, tuple[int, bool]]:
        pods = self.kube.call("list Kueue pods", self.kube.core.list_namespaced_pod, self.ns,
                              label_selector=SELECTOR).items
        out = {}
        for pod in pods:
            st = (pod.status.container_statuses or []) if pod.status else []
            out[pod.metadata.name] = (sum(c.restart_count for c in st), bool(st) and all(c.ready for c in st))
        return out

    def check(self) -> None:
        now = self._pods()
        for name, (restarts, _) in self.baseline.items():
            if name not in now:
                raise base.CaseFailed(f"Kueue's controller manager pod {self.ns}/{name} went away during the case "
                                      "(killed or evicted)")
            if now[name][0] > restarts:
                raise base.CaseFailed(f"Kueue's controller manager {self.ns}/{name} restarted during the case "
                                      f"({restarts} -> {now[name][0]} restarts)")
        if not any(ready for _, ready in now.values()):
            raise base.CaseFailed(f"Kueue's controller manager in {self.ns} has no ready pod during the case")


class KueueAdapter:
    stack = "kueue"

    def __init__(self, ctx: base.SuiteContext) -> None:
        self.p = params_from(ctx)
        self.kube = kube_client.Kube(ctx.kubeconfig)
        self.wait_seconds = self.p.wait_seconds
        self.settle_seconds = self.p.settle_seconds
        self.dog: Watchdog | None = None
        self.fair_sharing: bool | None = None
        self._last = 0.0

    def preflight(self, res: base.CaseResult) -> None:
        """Kueue's manager ready, its CRDs served, both PriorityClasses and 2 GPUs there; every
        missing piece named at once."""
        problems: list[str] = []
        ns = self.p.kueue_namespace
        what = f"read Deployment {ns}/{DEPLOYMENT}"
        if self.kube.exists(what, self.kube.apps.read_namespaced_deployment, DEPLOYMENT, ns):
            dep = self.kube.call(what, self.kube.apps.read_namespaced_deployment, DEPLOYMENT, ns)
            if not (dep.status.ready_replicas or 0):
                problems.append(f"Deployment {ns}/{DEPLOYMENT} has no ready pod")
            images = [c.image for c in dep.spec.template.spec.containers]
            res.details["kueue_image"] = images[0] if images else ""
        else:
            problems.append(f"Deployment {ns}/{DEPLOYMENT} does not exist (is Kueue installed?)")
        for plural in CRDS:
            if not self.kube.exists(f"list {plural}", self.kube.custom.list_cluster_custom_object,
                                    kueue_space.GROUP, kueue_space.VERSION, plural, limit=1):
                problems.append(f"{plural}.{kueue_space.GROUP}/{kueue_space.VERSION} is not served (Kueue's CRDs missing)")
        for pc in (self.p.preemptible_class, self.p.non_preemptible_class):
            if not self.kube.exists(f"read PriorityClass {pc}", self.kube.scheduling.read_priority_class, pc):
                problems.append(f"PriorityClass {pc} does not exist (installed by team-queues)")
        gpus = sum(gpu_inventory.free_gpus(self.kube).values())
        if gpus < 2:
            problems.append(f"needs at least 2 free GPUs, found {gpus}")
        if problems:
            raise base.CaseFailed("; ".join(problems))
        self.fair_sharing = self._fair_sharing()
        res.details.update({"free_gpus": gpus, "fair_sharing": self.fair_sharing})
        self.dog = Watchdog(self.kube, ns)

    def _fair_sharing(self) -> bool | None:
        """Whether Kueue's Configuration turns fair sharing on (None when it cannot be read)."""
        try:
            cm = self.kube.core.read_namespaced_config_map(CONFIG_MAP, self.p.kueue_namespace)
        except ApiException:
            return None
        for text in (cm.data or {}).values():
            cfg: Any = yaml.safe_load(text)
            if isinstance(cfg, dict) and cfg.get("kind") == "Configuration":
                return cfg.get("fairSharing") is not None
        return None

    def begin_case(self) -> None:
        """Kueue's manager ready and its webhooks answering (a server-side dry run), then a fresh
        watchdog: a manager killed in the previous case has been replaced by now."""
        probe = {"apiVersion": f"{kueue_space.GROUP}/{kueue_space.VERSION}", "kind": "ResourceFlavor",
                 "metadata": {"name": "conformance-probe"}, "spec": {}}

        def serving() -> bool:
            try:
                self.kube.custom.create_cluster_custom_object(kueue_space.GROUP, kueue_space.VERSION,
                                                              "resourceflavors", probe, dry_run="All")
            except ApiException:
                return False
            return any(ready for _, ready in Watchdog(self.kube, self.p.kueue_namespace).baseline.values())

        base.wait_for("Kueue's manager to serve before the case", serving, self.wait_seconds, interval=1.0)
        self.dog = Watchdog(self.kube, self.p.kueue_namespace)

    def end_case(self) -> None:
        if self.dog is not None:
            self.dog.check()

    def guard(self) -> None:
        now = time.monotonic()
        if self.dog is not None and now - self._last >= 1.0:
            self._last = now
            self.dog.check()

    def not_applicable(self, case: str) -> str:
        if case == "over_quota_weights_split_spare_gpus" and self.fair_sharing is False:
            return ("Kueue's Configuration has no fairSharing, so ClusterQueue weights are not used "
                    "(spare GPUs go first come, first served)")
        return ""

    @contextmanager
    def space(self, suite: str, res: base.CaseResult) -> Iterator[kueue_space.KueueSpace]:
        ns = f"{self.p.namespace_prefix}-{suite}-{secrets.token_hex(3)}"
        self.kube.call(f"create namespace {ns}", self.kube.core.create_namespace,
                       {"metadata": {"name": ns, "labels": {base.SUITE_LABEL: suite}}})
        sp = kueue_space.KueueSpace(self.kube, self.p, ns)
        try:
            yield sp
        finally:
            leftovers = sp.cleanup()
            if leftovers:
                res.details["cleanup_problems"] = leftovers

    def close(self) -> None:
        self.kube.close()
