"""SIM-ONLY node agent: what a GPU driver stack would do on a real node, for simulated nodes.

Nothing here is product code; it exists because the sim cluster has no GPUs. The agent process
(``python -m …sim.nodeagent --state DIR``, supervised) answers which GPU a KAI GPU-reservation
pod got, by writing the annotation ``run.ai/reserve_for_gpu_index`` (the GPU UUID) that KAI's
resource-reservation binary would write from NVML. GPUs come from the node folder's hardware
state (:func:`.nodefs.load_hw`); the node's ``nvidia-smi`` is :mod:`.nvidiasmi`'s.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

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


def annotate_reservations(core: Any, nodes_dir: Path) -> int:
    """Give each unannotated reservation pod a GPU of its node that no other one holds."""
    pods = core.list_namespaced_pod(RESERVATION_NAMESPACE).items
    taken: dict[str, set[str]] = {}
    for p in pods:
        ann = (p.metadata.annotations or {}).get(RESERVATION_ANNOTATION)
        if ann and p.spec.node_name:
            taken.setdefault(p.spec.node_name, set()).add(ann)
    done = 0
    for p in pods:
        if p.metadata.deletion_timestamp or not p.spec.node_name:
            continue
        if (p.metadata.annotations or {}).get(RESERVATION_ANNOTATION):
            continue
        free = [u for u in _gpu_uuids(nodes_dir / p.spec.node_name) if u not in taken.get(p.spec.node_name, set())]
        if not free:
            continue
        core.patch_namespaced_pod(p.metadata.name, RESERVATION_NAMESPACE,
                                  {"metadata": {"annotations": {RESERVATION_ANNOTATION: free[0]}}})
        taken.setdefault(p.spec.node_name, set()).add(free[0])
        done += 1
    return done


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
    while True:
        try:
            n = annotate_reservations(core, lay.nodes)
            if n:
                print(f"annotated {n} reservation pod(s)", flush=True)
        except client.ApiException as exc:
            if exc.status != 404:
                print(f"api error: {exc.status} {exc.reason}", flush=True)
        except (OSError, urllib3.exceptions.HTTPError) as exc:  # API server restarting
            print(f"connection error: {exc}", flush=True)
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main())
