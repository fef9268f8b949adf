"""Facts about the cluster a certification runs on, read through the Kubernetes API: version,
GPU nodes, the preflight a bundle needs, and what ran live versus simulated. Called by
``pipelines.certify``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from gpucatalog.catalog import render, versions
from gpucatalog.core import kubeapi


def _api(kubeconfig: Path) -> Any:
    # Typed as Any: the client's generated models mark every field Optional.
    return kubeapi.client_for(kubeconfig)


def _core(kubeconfig: Path) -> Any:
    return client.CoreV1Api(_api(kubeconfig))


def describe(kubeconfig: Path, prov: Any) -> dict[str, Any]:
    api = _api(kubeconfig)
    ver: Any = client.VersionApi(api).get_code()
    nodes = []
    node_list: Any = client.CoreV1Api(api).list_node()
    for n in node_list.items:
        labels = n.metadata.labels or {}
        nodes.append(
            {
                "name": n.metadata.name,
                "gpus": int((n.status.capacity or {}).get("nvidia.com/gpu", "0")),
                "product": labels.get("nvidia.com/gpu.product", ""),
                "gpuMemoryMiB": labels.get("nvidia.com/gpu.memory", ""),
            }
        )
    return {"kubernetesVersion": ver.git_version, "nodes": nodes, "name": getattr(prov, "name", "")}


def preflight(info: dict[str, Any], rb: render.RenderedBundle) -> list[str]:
    """What the cluster ``info`` (from ``describe``) lacks for this bundle: a Kubernetes version
    in every component's range, and GPU nodes. Empty when it is fine."""
    problems = []
    kver = str(info["kubernetesVersion"]).lstrip("v").split("-")[0].split("+")[0]
    for c in rb.components:
        rng = rb.lock_component(c.name).get("kubernetes")
        if rng and not versions.satisfies(kver, rng):
            problems.append(f"{c.name} supports Kubernetes {rng}, cluster runs {kver}")
    if not any(n["gpus"] > 0 for n in info["nodes"]):
        problems.append("no node advertises nvidia.com/gpu capacity")
    return problems


def live_and_simulated(kubeconfig: Path, prov: Any) -> tuple[list[str], list[str]]:
    """Which of the bundle's pods ran as real processes and which were only simulated."""
    live: list[str] = list(getattr(prov, "live_parts", lambda: [])())
    simulated: list[str] = list(getattr(prov, "simulated_parts", lambda: [])())
    if type(prov).__name__ != "SimCluster":
        return live, simulated
    from gpucatalog.clusters.sim import images as sim_images

    live.append("control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler (pinned builds)")
    live.append("kwok: node and pod lifecycle of simulated nodes")
    simulated.append("GPU hardware and driver: nvidia-smi XML, kernel log, InfiniBand sysfs per node folder")
    pods: list[Any] = _core(kubeconfig).list_pod_for_all_namespaces().items
    for p in pods:
        imgs = sorted({c.image for c in p.spec.containers})
        ident = f"pod {p.metadata.namespace}/{p.metadata.name} ({', '.join(imgs)})"
        if p.spec.node_name and all(sim_images.lookup(i) is not None for i in imgs):
            live.append(ident + ": real process run by the sim kubelet")
        elif not p.metadata.namespace.startswith("conformance"):
            simulated.append(ident + ": status simulated by kwok (image not runnable here)")
    return live, simulated


def endpoints(prov: Any) -> dict[str, str]:
    """Non-Kubernetes endpoints a provider offers suites (e.g. the Slurm cluster's slurm.conf)."""
    fn = getattr(prov, "endpoints", None)
    return dict(fn()) if fn else {}
