"""SIMULATED GPU agent of kind's GPU workers: what a node's GPU stack does for KAI's GPU sharing.

KAI's binder holds a GPU for fractional pods with a reservation pod in ``kai-resource-reservation``.
On a real node the device plugin gives that pod one GPU, and KAI's resource-reservation binary
reads that GPU's UUID from NVML and writes it on its own pod (``run.ai/reserve_for_gpu_index``);
the binder waits for it. Under fake-gpu-operator, its status updater writes it. On kind with
node-patch GPUs (no device plugin, no NVML) nothing would, so this agent does: one pod per GPU
worker (a DaemonSet), the only writer for its node, gives each unannotated reservation pod on
it a GPU no other one holds. The UUIDs are the node's simulated GPUs (``sim/hw.json`` of the
node folder, :mod:`.nodehw`), the ones its nvidia-smi prints; the choice is the sim node agent's
(:func:`gpucatalog.clusters.sim.nodeagent.reservation_assignments`).

The provider installs it (:func:`manifests`) when a bundle runs KAI's resource-reservation image,
whose image here is a SIMULATED stand-in (pause). The evidence lists both as simulated.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from gpucatalog.clusters.kind.nodehw import NODE_ROOT
from gpucatalog.clusters.sim import nodeagent, nodefs

NAMESPACE = "gpu-catalog-sim"
NAME = "sim-gpu-agent"
GPU_SELECTOR = {"nvidia.com/gpu.present": "true"}


def manifests(image: str) -> list[dict[str, Any]]:
    """The agent: its namespace and account, listing and patching pods (no more), and the
    DaemonSet on the GPU workers, reading the node folder read-only."""
    meta = {"name": NAME, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/name": NAME}}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        # cluster-wide: the reservation namespace is the KAI chart's, installed after this agent
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": NAME},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": NAME},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta, "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "template": {"metadata": {"labels": {"app.kubernetes.io/name": NAME}}, "spec": {
                "serviceAccountName": NAME,
                "nodeSelector": GPU_SELECTOR,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{
                    "name": "agent", "image": image, "imagePullPolicy": "IfNotPresent",
                    "command": ["python3", "-m", "gpucatalog.clusters.kind.gpuagent", "--root", NODE_ROOT],
                    "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "node", "mountPath": NODE_ROOT, "readOnly": True}]}],
                "volumes": [{"name": "node", "hostPath": {"path": NODE_ROOT, "type": "Directory"}}]}}}},
    ]


def node_uuids(root: Path) -> list[str]:
    """The node's GPUs still on the bus, as its simulated nvidia-smi lists them."""
    try:
        hw = nodefs.load_hw(root)
    except (OSError, ValueError):
        return []
    return [g["uuid"] for g in hw.get("gpus", []) if not g.get("fallen_off_bus")]


def once(core: Any, node: str, root: Path) -> int:
    """Annotate the reservation pods on ``node``; returns how many."""
    pods = core.list_namespaced_pod(nodeagent.RESERVATION_NAMESPACE, field_selector=f"spec.nodeName={node}").items
    return nodeagent.annotate(core, nodeagent.reservation_assignments(pods, lambda _node: node_uuids(root)))


def main(argv: list[str] | None = None) -> int:
    from kubernetes import client, config

    ap = argparse.ArgumentParser(prog="sim-gpu-agent", description=__doc__.split("\n", 1)[0])
    ap.add_argument("--root", type=Path, default=Path(NODE_ROOT))
    ap.add_argument("--interval", type=float, default=0.5)
    args = ap.parse_args(argv)
    node = os.environ["NODE_NAME"]
    config.load_incluster_config()  # type: ignore[no-untyped-call]
    core: Any = client.CoreV1Api()
    print(f"SIMULATED GPU agent on {node}: {len(node_uuids(args.root))} GPUs", flush=True)
    while True:
        try:
            n = once(core, node, args.root)
            if n:
                print(f"annotated {n} reservation pod(s)", flush=True)
        except client.ApiException as exc:
            if exc.status != 404:  # no reservation namespace yet
                print(f"api error: {exc.status} {exc.reason}", flush=True)
        except OSError as exc:
            print(f"connection error: {exc}", flush=True)
        time.sleep(args.interval)


if __name__ == "__main__":
    raise SystemExit(main())
