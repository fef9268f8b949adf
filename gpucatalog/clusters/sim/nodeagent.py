"""SIM-ONLY node agent: what a GPU driver stack would do on a real node, for simulated nodes.

Nothing here is product code; it exists because the sim cluster has no GPUs. The agent process
(``python -m …sim.nodeagent --state DIR``, supervised) answers which GPU a KAI GPU-reservation
pod got, by writing the annotation ``run.ai/reserve_for_gpu_index`` (the GPU UUID) that KAI's
resource-reservation binary would write from NVML. It also makes the GPUs of a node that runs
work read busy in ``nvidia-smi`` (P0, link at its trained speed), as a real driver would, while
the others read idle (:func:`mark_busy`). GPUs come from the node folder's hardware state
(:func:`.nodefs.load_hw`); the node's ``nvidia-smi`` is :mod:`.nvidiasmi`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpucatalog.clusters import shapes
from gpucatalog.clusters.sim import nodefs

RESERVATION_NAMESPACE = "kai-resource-reservation"
RESERVATION_ANNOTATION = "run.ai/reserve_for_gpu_index"


def _gpu_uuids(node_dir: Path) -> list[str]:
    nodefs.ensure(node_dir.parent, node_dir.name, node_dir.parent.parent.name)
    try:
        hw = nodefs.load_hw(node_dir)
    except OSError:
        return []
    return [g["uuid"] for g in hw["gpus"] if not g["fallen_off_bus"]]


def reservation_assignments(pods: list[Any], uuids_of: Callable[[str], list[str]]) -> list[tuple[str, str]]:
    """(pod, GPU UUID) for each unannotated reservation pod among ``pods``: a GPU of its node
    (``uuids_of(node)``, in order) that no other reservation pod holds. Pure: the caller patches."""
    taken: dict[str, set[str]] = {}
    for p in pods:
        ann = (p.metadata.annotations or {}).get(RESERVATION_ANNOTATION)
        if ann and p.spec.node_name:
            taken.setdefault(p.spec.node_name, set()).add(ann)
    out = []
    for p in pods:
        if p.metadata.deletion_timestamp or not p.spec.node_name:
            continue
        if (p.metadata.annotations or {}).get(RESERVATION_ANNOTATION):
            continue
        free = [u for u in uuids_of(p.spec.node_name) if u not in taken.get(p.spec.node_name, set())]
        if free:
            out.append((p.metadata.name, free[0]))
            taken.setdefault(p.spec.node_name, set()).add(free[0])
    return out


def annotate(core: Any, assignments: list[tuple[str, str]]) -> int:
    for name, uuid in assignments:
        core.patch_namespaced_pod(name, RESERVATION_NAMESPACE, {"metadata": {"annotations": {RESERVATION_ANNOTATION: uuid}}})
    return len(assignments)


def annotate_reservations(core: Any, nodes_dir: Path) -> int:
    """Give each unannotated reservation pod a GPU of its node that no other one holds."""
    pods = core.list_namespaced_pod(RESERVATION_NAMESPACE).items
    return annotate(core, reservation_assignments(pods, lambda node: _gpu_uuids(nodes_dir / node)))


GPU_RESOURCE = "nvidia.com/gpu"
# KAI's GPU-sharing pods ask for a share of one GPU through annotations instead of the resource
GPU_SHARE_ANNOTATIONS = ("gpu-fraction", "gpu-memory")


def gpus_in_use(pods: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Node -> number of GPUs its running pods use (whole GPUs requested, a share counts as one).
    ``pods`` are the API's JSON objects."""
    used: dict[str, int] = {}
    for p in pods:
        meta, spec, status = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}
        node = spec.get("nodeName")
        if meta.get("deletionTimestamp") or not node or status.get("phase") != "Running":
            continue
        n = 0
        for c in spec.get("containers") or []:
            res = c.get("resources") or {}
            n += int((res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE) or 0)
        if not n and any(a in (meta.get("annotations") or {}) for a in GPU_SHARE_ANNOTATIONS):
            n = 1
        if n:
            used[node] = used.get(node, 0) + n
    return used


def running_pods(core: Any) -> list[dict[str, Any]]:
    """Every running pod as the API's plain JSON, from the API server's cache."""
    from gpucatalog.core import kubeapi

    found = kubeapi.plain_json(core.list_pod_for_all_namespaces, field_selector="status.phase=Running",
                               resource_version="0")
    return list(found.get("items") or [])


def mark_busy(core: Any, nodes_dir: Path, cluster: str, known: dict[str, int]) -> int:
    """Make the first N GPUs of each node read busy, N = the GPUs its running pods use; ``known``
    (node -> N last written) keeps untouched nodes from being rewritten every second."""
    used = gpus_in_use(running_pods(core))
    changed = 0
    for node in set(used) | {n for n, c in known.items() if c}:
        count = used.get(node, 0)
        if known.get(node) == count:
            continue
        node_dir = nodefs.ensure(nodes_dir, node, cluster)
        name = nodefs.shape_name(nodes_dir, node)
        if node_dir is None or name is None or shapes.get(name).gpu is None:
            known[node] = count
            continue
        changed += nodefs.set_work_busy(node_dir, shapes.get(name), set(range(count)))
        known[node] = count
    return changed


def busy_at_start(nodes_dir: Path) -> dict[str, int]:
    """GPUs marked busy by an earlier run of this agent (so a restart clears what went idle)."""
    return {p.parent.parent.name: len(json.loads(p.read_text()).get("gpus", []))
            for p in nodes_dir.glob("*/sim/busy.json")}


def main(argv: list[str] | None = None) -> int:
    import urllib3
    from kubernetes import client

    from gpucatalog.clusters.sim.layout import Layout
    from gpucatalog.core import kubeapi

    ap = argparse.ArgumentParser(prog="sim-node-agent")
    ap.add_argument("--state", required=True, type=Path)
    args = ap.parse_args(argv)
    lay = Layout(args.state)
    core: Any = client.CoreV1Api(kubeapi.client_for(lay.component_kubeconfig("sim-kubelet")))
    print(f"sim node agent up (pid {os.getpid()})", flush=True)
    busy = busy_at_start(lay.nodes)
    while True:
        try:
            n = annotate_reservations(core, lay.nodes)
            if n:
                print(f"annotated {n} reservation pod(s)", flush=True)
            n = mark_busy(core, lay.nodes, lay.name, busy)
            if n:
                print(f"GPU load changed on {n} node(s)", flush=True)
        except client.ApiException as exc:
            if exc.status != 404:
                print(f"api error: {exc.status} {exc.reason}", flush=True)
        except (OSError, urllib3.exceptions.HTTPError) as exc:  # API server restarting
            print(f"connection error: {exc}", flush=True)
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main())
