"""The pods and PodGroups the KAI suites submit, and how they read KAI's answer back: whether a
pod is scheduled, KAI's reason for keeping it pending, when it was scheduled, and where a pod got
its GPU share (from KAI's GPU-group label and the reservation pod's report).

Called by the KAI suites (``fractional_gpu``, ``quota_reclaim``, ``gang``). Builders are plain
dicts; only ``placement`` talks to the Kubernetes API.
"""

from __future__ import annotations

from typing import Any

from gpucatalog.validators.conformance.kai import math as kai_math
from gpucatalog.validators.conformance.kai import params as kai_params
from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client

FRACTION_ANNOTATION = "gpu-fraction"
MEMORY_ANNOTATION = "gpu-memory"
POD_GROUP_ANNOTATION = "pod-group-name"
GPU_GROUP_LABEL = kai_params.GPU_GROUP_LABEL
RESERVED_GPU_ANNOTATION = "run.ai/reserve_for_gpu_index"


def pod(p: kai_params.Params, name: str, queue: str, *, group: str, gpus: int = 0, fraction: float | None = None,
        gpu_memory: int | None = None, priority_class: str | None = None, pod_group: str | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod for KAI: its scheduler, queue label, GPU request (whole, fraction or memory)."""
    ann = dict(annotations or {})
    if fraction is not None:
        ann[FRACTION_ANNOTATION] = f"{fraction:g}"
    if gpu_memory is not None:
        ann[MEMORY_ANNOTATION] = str(gpu_memory)
    if pod_group:
        ann[POD_GROUP_ANNOTATION] = pod_group
    container: dict[str, Any] = {"name": "main", "image": p.workload_image,
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
    if gpus:
        container["resources"]["limits"] = {gpu_inventory.GPU: str(gpus)}
    spec: dict[str, Any] = {
        "schedulerName": p.scheduler_name,
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"key": gpu_inventory.GPU, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {p.queue_label_key: queue, base.SUITE_LABEL: group},
                         "annotations": ann},
            "spec": spec}


def pin(body: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """Restrict a pod to ``nodes`` by name (node affinity on metadata.name; needs no labels).

    One selector term per node: the API server accepts a single value for ``metadata.name``
    ``In`` (``matchFields[0].values: must be only one value``), and terms are ORed. No nodes: the
    pod may go anywhere (the scale cases spread over the whole cluster)."""
    if not nodes:
        return body
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]} for n in nodes]
    body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}
    return body


def pod_group(name: str, ns: str, queue: str, min_member: int, priority_class: str) -> dict[str, Any]:
    """An explicit PodGroup: KAI starts none of its pods until ``min_member`` of them fit."""
    return {"apiVersion": f"{kai_params.GROUP}/v2alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"minMember": min_member, "queue": queue, "priorityClassName": priority_class}}


def condition(pod_obj: Any, kind: str) -> Any:
    for cond in (pod_obj.status.conditions or []) if pod_obj.status else []:
        if cond.type == kind:
            return cond
    return None


def is_scheduled(pod_obj: Any) -> bool:
    cond = condition(pod_obj, "PodScheduled")
    return bool(pod_obj.spec.node_name) or (cond is not None and cond.status == "True")


def unschedulable_reason(pod_obj: Any) -> str:
    """KAI's reason for keeping a pod pending ('' while it has not decided)."""
    cond = condition(pod_obj, "PodScheduled")
    if cond is not None and cond.status == "False" and not pod_obj.spec.node_name:
        return f"{cond.reason}: {cond.message or ''}".strip()
    return ""


def scheduled_at(pod_obj: Any) -> float | None:
    cond = condition(pod_obj, "PodScheduled")
    if cond is not None and cond.status == "True" and cond.last_transition_time is not None:
        return float(cond.last_transition_time.timestamp())
    return None


def _whole_gpus(pod_obj: Any) -> int:
    gpus = 0
    for c in pod_obj.spec.containers:
        limits = (c.resources.limits or {}) if c.resources else {}
        gpus += int(str(limits.get(gpu_inventory.GPU, "0")))
    return gpus


def _fraction(pod_obj: Any, memory_mib: dict[str, int]) -> float:
    """The share of one device a pod asked for: its ``gpu-fraction``, or its ``gpu-memory`` over
    the node's per-GPU memory; 0 for a pod that asked for neither."""
    ann = pod_obj.metadata.annotations or {}
    node = pod_obj.spec.node_name or ""
    try:
        if FRACTION_ANNOTATION in ann:
            return float(ann[FRACTION_ANNOTATION])
        if MEMORY_ANNOTATION in ann and memory_mib.get(node):
            return min(1.0, int(ann[MEMORY_ANNOTATION]) / memory_mib[node])
    except ValueError:
        return 0.0  # another tenant's malformed annotation: KAI's admission refuses such pods
    return 0.0


def placement(kube: kube_client.Kube, p: kai_params.Params, pod_obj: Any,
              memory_mib: dict[str, int]) -> kai_math.Placement:
    """Where ``pod_obj`` got its GPU share, from KAI's labels and the reservation pod's report."""
    node = pod_obj.spec.node_name or ""
    group = (pod_obj.metadata.labels or {}).get(GPU_GROUP_LABEL, "")
    gpu = group
    if group:
        for r in reservation_pods(kube, p, group):
            index = (r.metadata.annotations or {}).get(RESERVED_GPU_ANNOTATION)
            if index and r.spec.node_name == node:
                gpu = f"{group}/{index}"
    return kai_math.Placement(pod=pod_obj.metadata.name, node=node, gpu=gpu, fraction=_fraction(pod_obj, memory_mib),
                              gpus=_whole_gpus(pod_obj))


def reservation_pods(kube: kube_client.Kube, p: kai_params.Params, group: str = "") -> list[Any]:
    """KAI's reservation pods (one per shared GPU, in the reservation namespace), of ``group`` or all."""
    selector = f"{GPU_GROUP_LABEL}={group}" if group else GPU_GROUP_LABEL
    return list(kube.call("list reservation pods", kube.core.list_namespaced_pod, p.reservation_namespace,
                          label_selector=selector).items)


def gpu_uses(kube: kube_client.Kube, p: kai_params.Params, memory_mib: dict[str, int]) -> list[kai_math.GpuUse]:
    """Every bound, not finished pod's claim on GPUs, across all namespaces (other tenants and
    KAI's reservation pods included), for ``kai.math.oversubscription``."""
    out: list[kai_math.GpuUse] = []
    for q in kube.call("list pods", kube.core.list_pod_for_all_namespaces).items:
        node = q.spec.node_name
        if not node or (q.status and q.status.phase in ("Succeeded", "Failed")):
            continue
        labels = q.metadata.labels or {}
        reservation = q.metadata.namespace == p.reservation_namespace
        out.append(kai_math.GpuUse(
            pod=f"{q.metadata.namespace}/{q.metadata.name}", node=node, gpus=_whole_gpus(q),
            group=labels.get(GPU_GROUP_LABEL, ""), fraction=0.0 if reservation else _fraction(q, memory_mib),
            device=(q.metadata.annotations or {}).get(RESERVED_GPU_ANNOTATION, "") if reservation else "",
            reservation=reservation))
    return out
