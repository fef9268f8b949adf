"""Simulated Node objects built from a node shape, and their bulk creation.

Called by ``cluster.up`` (and ``SimCluster.add_nodes``). A node carries the capacity
(``nvidia.com/gpu``, cpu, memory, pods) and the labels a real GPU node gets from GPU feature
discovery and the cloud (``nvidia.com/gpu.product|count|memory``, topology labels); kwok then
moves it to Ready and keeps its Lease fresh.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpucatalog.clusters.shapes import Shape

SIM_LABEL = "sim.gpu-catalog.dev/node"
SHAPE_LABEL = "sim.gpu-catalog.dev/shape"
NODES_PER_BLOCK = 8  # one leaf switch / NVLink domain: the scheduler's topology unit
BLOCKS_PER_SPINE = 8


def node_name(shape: Shape, index: int) -> str:
    prefix = "cpu-node" if shape.gpu is None else f"{shape.name.split('-')[0]}-node"
    return f"{prefix}-{index:04d}"


def labels(shape: Shape, name: str, index: int) -> dict[str, str]:
    block = index // NODES_PER_BLOCK
    out = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": shape.name,
        "topology.kubernetes.io/region": "sim",
        "topology.kubernetes.io/zone": "sim-a",
        "network.topology.gpu-catalog.dev/block": f"block-{block:03d}",
        "network.topology.gpu-catalog.dev/spine": f"spine-{block // BLOCKS_PER_SPINE:02d}",
        "type": "kwok",
        SIM_LABEL: "true",
        SHAPE_LABEL: shape.name,
    }
    if shape.gpu is not None:
        g = shape.gpu
        out.update({
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": g.product,
            "nvidia.com/gpu.count": str(g.count),
            "nvidia.com/gpu.memory": str(g.memory_mib),
            "nvidia.com/gpu.family": g.family,
            "nvidia.com/gpu.compute.major": str(g.compute_major),
            "nvidia.com/gpu.compute.minor": str(g.compute_minor),
            "nvidia.com/cuda.driver.major": g.driver_version.split(".")[0],
            "nvidia.com/cuda.runtime.major": g.cuda_version.split(".")[0],
            "nvidia.com/cuda.runtime.minor": g.cuda_version.split(".")[1],
            # NVLink domain: the GPUs of one node share an NVSwitch fabric
            "nvidia.com/gpu.clique": f"sim-{name}",
        })
    return out


def node_object(shape: Shape, index: int) -> dict[str, Any]:
    name = node_name(shape, index)
    capacity = {
        "cpu": shape.cpu,
        "memory": shape.memory,
        "pods": str(shape.pods),
        "ephemeral-storage": shape.ephemeral_storage,
    }
    if shape.gpu is not None:
        capacity["nvidia.com/gpu"] = str(shape.gpu.count)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels(shape, name, index),
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def create(core: Any, objs: list[dict[str, Any]], workers: int = 16) -> None:
    """Create ``objs`` through the API in parallel (a 1,000-node cluster in seconds)."""
    def one(obj: dict[str, Any]) -> None:
        core.create_node(obj)

    with ThreadPoolExecutor(max_workers=min(workers, max(1, len(objs)))) as pool:
        for f in [pool.submit(one, o) for o in objs]:
            f.result()
