"""What GPUs the cluster's nodes offer, as the Kubernetes API reports them: allocatable whole
GPUs per schedulable node, what running pods leave free, per-GPU memory from the node label, and
the choice of nodes a case fills.

Called by the KAI suites (``fractional_gpu``, ``quota_reclaim``, ``gang``), their preflight
(``kai.preflight``) and placement reading (``kai.pods``).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucatalog.validators.conformance.kit import base, kube_client

GPU = "nvidia.com/gpu"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"


def gpu_capacity(kube: kube_client.Kube) -> dict[str, int]:
    """Allocatable whole GPUs per schedulable node."""
    out: dict[str, int] = {}
    for node in kube.call("list nodes", kube.core.list_node).items:
        if node.spec and node.spec.unschedulable:
            continue
        gpus = int(str((node.status.allocatable or {}).get(GPU, "0")))
        if gpus > 0:
            out[node.metadata.name] = gpus
    return out


def free_gpus(kube: kube_client.Kube) -> dict[str, int]:
    """Whole GPUs per node not requested by any pod bound there that is still running."""
    free = gpu_capacity(kube)
    for pod_obj in kube.call("list pods", kube.core.list_pod_for_all_namespaces).items:
        node = pod_obj.spec.node_name
        if node not in free or (pod_obj.status and pod_obj.status.phase in ("Succeeded", "Failed")):
            continue
        for c in pod_obj.spec.containers:
            limits = (c.resources.limits or {}) if c.resources else {}
            free[node] -= int(str(limits.get(GPU, "0")))
    return {n: max(0, v) for n, v in free.items()}


def gpu_memory_mib(kube: kube_client.Kube) -> dict[str, int]:
    """Per-GPU memory (MiB) of each GPU node from its ``nvidia.com/gpu.memory`` label."""
    out: dict[str, int] = {}
    for node in kube.call("list nodes", kube.core.list_node).items:
        value = (node.metadata.labels or {}).get(GPU_MEMORY_LABEL)
        if value and value.isdigit():
            out[node.metadata.name] = int(value)
    return out


def whole_nodes(free: Mapping[str, int], cap: int) -> tuple[list[str], int]:
    """Nodes with free GPUs, most free first, taken whole while their GPUs add up to at most
    ``cap`` (the first node always, whatever its count); returns them and their free GPUs."""
    nodes: list[str] = []
    total = 0
    for node, count in sorted(free.items(), key=lambda kv: (-kv[1], kv[0])):
        if count and (not nodes or total + count <= cap):
            nodes.append(node)
            total += count
    return nodes, total


def roomiest_node(free: Mapping[str, int], need: int) -> tuple[str, int]:
    """The node with the most free GPUs (the first such in ``free``'s order); ``CaseFailed``
    when even it has fewer than ``need``."""
    node, count = max(free.items(), key=lambda kv: kv[1])
    if count < need:
        raise base.CaseFailed(f"needs a node with {need} free GPUs; best is {node} with {count}")
    return node, count
