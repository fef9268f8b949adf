"""SIM-ONLY stand-in for the kubelet plugin of NVIDIA's DRA driver: keeps one node's ResourceSlices
(:mod:`.dra`) published.

The driver charts' kubelet-plugin DaemonSet (``nvidia-dra-driver`` for NVIDIA's 25.8.0 image,
``dra-driver-nvidia-gpu`` for the kubernetes-sigs release) names the driver's image; the sim
kubelet runs this module for it (``data/images.yaml``), one process per GPU node, as it would run
the real plugin. Every ``--interval`` seconds it reads the node (shape label, gpu-health state
label) and the node's GPUs from ``<driver-root>/sim/hw.json`` (the sim's NVML, a hostPath of the
node folder), and when the slices it would publish differ from those in the API it writes them
under the next pool generation. It never deletes its slices on exit: killed or restarted, the
slices stay as they were, as with a real driver restart. :func:`reconcile` is also called by
``bench/dra_allocation.py`` and the tests to publish slices without a process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpucatalog.clusters import shapes
from gpucatalog.clusters.sim import dra

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceslices"
NODE_LABEL = "gpu.nvidia.com/node"
SHAPE_LABEL = "sim.gpu-catalog.dev/shape"
KIND_SHAPE_LABEL = "gpu-catalog.dev/shape"  # what the kind provider labels its workers with


def _strip(spec: dict[str, Any]) -> dict[str, Any]:
    """A slice spec without its pool generation and the taints' ``timeAdded`` the API server
    stamps (what changes only when content changes)."""
    devices = [{**d, "taints": [{k: v for k, v in t.items() if k != "timeAdded"} for t in d["taints"]]}
               if d.get("taints") else d for d in spec.get("devices") or []]
    out = {**spec, "pool": {k: v for k, v in spec["pool"].items() if k != "generation"}}
    if devices:
        out["devices"] = devices
    return out


def _canon(spec: dict[str, Any]) -> str:
    return json.dumps(_strip(spec), sort_keys=True)


def reconcile(api: Any, node: str, specs: Sequence[dict[str, Any]]) -> int | None:
    """Make the API hold exactly ``specs`` for ``node``'s pool; returns the new pool generation,
    or None when nothing changed. ``api`` is a ``CustomObjectsApi``."""
    existing = {o["metadata"]["name"]: o for o in api.list_cluster_custom_object(
        GROUP, VERSION, PLURAL, label_selector=f"{NODE_LABEL}={node}")["items"]}
    gen = max((int(o["spec"]["pool"]["generation"]) for o in existing.values()), default=0)
    wanted = dra.slice_objects(node, specs, gen + 1)
    same = (len(wanted) == len(existing) and all(
        w["metadata"]["name"] in existing and _canon(w["spec"]) == _canon(existing[w["metadata"]["name"]]["spec"])
        for w in wanted))
    if same:
        return None
    for w in wanted:
        old = existing.pop(w["metadata"]["name"], None)
        if old is None:
            api.create_cluster_custom_object(GROUP, VERSION, PLURAL, w)
        else:
            w["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            api.replace_cluster_custom_object(GROUP, VERSION, PLURAL, w["metadata"]["name"], w)
    for name in existing:  # slices of a GPU no longer published
        api.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    return gen + 1


def node_specs(core: Any, node: str, driver_root: Path, mode: str) -> list[dict[str, Any]]:
    """The slice specs for ``node`` now: its shape from the node's label, its GPUs from the
    driver root's hardware state, its gpu-health state from the state label."""
    obj = core.read_node(node)
    labels = obj.metadata.labels or {}
    shape = shapes.get(labels.get(SHAPE_LABEL) or labels.get(KIND_SHAPE_LABEL)
                       or labels.get("node.kubernetes.io/instance-type", ""))
    hw = json.loads((driver_root / "sim" / "hw.json").read_text())
    return dra.slice_specs(node, shape, hw["gpus"], mode, labels.get(dra.HEALTH_STATE_LABEL, "healthy"))


def arguments(prog: str) -> argparse.ArgumentParser:
    """The flags and environment both driver charts give the plugin's container (the kind stand-in
    adds its own)."""
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""))
    ap.add_argument("--mode", default=os.environ.get("GPU_SHARING_MODE", "exclusive"), choices=dra.MODES)
    # Both driver charts mount the host's driver root at /driver-root, where the real plugin reads
    # it; NVIDIA_DRIVER_ROOT is the host's path for it from 0.4.0 on, not a path in the container.
    ap.add_argument("--driver-root", type=Path, default=Path("/driver-root"))
    ap.add_argument("--interval", type=float, default=float(os.environ.get("PUBLISH_INTERVAL_SECONDS", "2")),
                    help="seconds between reconciliations")
    # the real binary's klog verbosity flag (the 0.5.0 chart passes it): accepted, not used
    ap.add_argument("-v", dest="verbosity", type=int, default=0, help=argparse.SUPPRESS)
    return ap


def publish_forever(api_client: Any, args: argparse.Namespace) -> None:
    """Reconcile the node's slices every ``args.interval`` seconds, saying what changed; API and
    file errors are reported and retried on the next round."""
    import urllib3
    from kubernetes import client

    from gpucatalog.core import errors

    core: Any = client.CoreV1Api(api_client)
    custom: Any = client.CustomObjectsApi(api_client)
    while True:
        try:
            gen = reconcile(custom, args.node_name, node_specs(core, args.node_name, args.driver_root, args.mode))
            if gen is not None:
                print(f"published pool {args.node_name} generation {gen}", flush=True)
        except client.ApiException as exc:
            print(f"api error: {exc.status} {exc.reason}", flush=True)
        except (OSError, ValueError, urllib3.exceptions.HTTPError) as exc:  # API server restarting, hw.json rewritten
            print(f"not published this round: {exc}", flush=True)
        except errors.NotFoundError as exc:  # a node without a known shape label
            print(f"not published: {exc}", flush=True)
        time.sleep(args.interval)


def main(argv: list[str] | None = None) -> int:
    from gpucatalog.core import kubeapi

    ap = arguments("gpu-kubelet-plugin (sim stand-in)")
    args = ap.parse_args(argv)
    if not args.node_name:
        ap.error("--node-name (or $NODE_NAME) is required")
    api_client = kubeapi.client_for(None)  # $KUBECONFIG: the sim kubelet's one for this pod
    print(f"sim DRA publisher for {args.node_name} up (mode {args.mode}, pid {os.getpid()})", flush=True)
    publish_forever(api_client, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
