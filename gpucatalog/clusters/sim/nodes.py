"""Simulated Node objects built from a node shape, and their bulk creation.

Called by ``cluster.up`` (and ``SimCluster.add_nodes``). A node carries the capacity
(``nvidia.com/gpu``, cpu, memory, pods) and the labels a real GPU node gets from GPU feature
discovery and the cloud (``nvidia.com/gpu.product|count|memory``, topology labels). Given the
kubelet port, it is created Ready, as a kubelet registers its node with a status, and kwok only
keeps its Lease fresh; without it, kwok moves it to Ready (one more write per node).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from gpucatalog.clusters.shapes import Shape

SIM_LABEL = "sim.gpu-catalog.dev/node"
SHAPE_LABEL = "sim.gpu-catalog.dev/shape"
# the conditions a healthy kubelet reports (kwok's own set)
CONDITIONS = (("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
              ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
              ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
              ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
              ("NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"))
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
        # the controller manager would add these two to every node (one more write per node)
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
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


def node_object(shape: Shape, index: int, kubelet_port: int | None = None, kwok_version: str = "") -> dict[str, Any]:
    """The Node; with ``kubelet_port`` (the port its kubelet API is served on) already Ready, with
    the status kwok's node-initialize stage would write (``data/kwok-stages.yaml``)."""
    name = node_name(shape, index)
    capacity = {
        "cpu": shape.cpu,
        "memory": shape.memory,
        "pods": str(shape.pods),
        "ephemeral-storage": shape.ephemeral_storage,
    }
    if shape.gpu is not None:
        capacity["nvidia.com/gpu"] = str(shape.gpu.count)
    status: dict[str, Any] = {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": name},
        ],
    }
    if kubelet_port is not None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status.update({
            "conditions": [{"type": t, "status": st, "reason": r, "message": m, "lastHeartbeatTime": now,
                            "lastTransitionTime": now} for t, st, r, m in CONDITIONS],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                         "kubeletVersion": f"sim-kwok-{kwok_version}", "kubeProxyVersion": f"sim-kwok-{kwok_version}",
                         "containerRuntimeVersion": "sim://gpu-catalog", "kernelVersion": "sim",
                         "osImage": "gpu-catalog sim node", "machineID": "", "bootID": "", "systemUUID": ""},
            "phase": "Running",
        })
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels(shape, name, index),
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": status,
    }


def create(core: Any, objs: list[dict[str, Any]], workers: int = 16) -> None:
    """Create ``objs`` through the API in parallel (a 1,000-node cluster in seconds).

    Plain daemon threads, each with its own share, rather than a ThreadPoolExecutor: Ctrl-C lands
    in the waiting main thread, and an executor interrupted there (its shutdown waits for every
    queued call; a KeyboardInterrupt between a lock's acquire and its with-block leaves the lock
    held) could keep ``up`` from tearing down. Here the main thread shares no lock with the
    workers and leaves them behind at once."""
    errors: list[BaseException] = []

    def share(part: list[dict[str, Any]]) -> None:
        try:
            for obj in part:
                core.create_node(obj, _request_timeout=60)  # never a call that waits forever
        except Exception as exc:  # noqa: BLE001  # any API error: handed to the main thread, which raises the first
            errors.append(exc)

    n = min(workers, max(1, len(objs)))
    threads = [threading.Thread(target=share, args=(objs[i::n],), name=f"create-node-{i}", daemon=True)
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)  # a short timeout: the main thread stays interruptible
    if errors:
        raise errors[0]
