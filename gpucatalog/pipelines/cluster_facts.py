"""Facts about the cluster a certification runs on, read through the Kubernetes API: version,
GPU nodes, the preflight a bundle needs, and what the provider says ran live versus simulated.
Called by ``pipelines.certify``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client

from gpucatalog.catalog import render, versions
from gpucatalog.clusters import provider as providers
from gpucatalog.core import kubeapi


def _api(kubeconfig: Path) -> Any:
    # Typed as Any: the client's generated models mark every field Optional.
    return kubeapi.client_for(kubeconfig)


def describe(kubeconfig: Path, prov: providers.ClusterProvider) -> dict[str, Any]:
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
    return {"kubernetesVersion": ver.git_version, "nodes": nodes, "name": prov.name}


def release_of(info: dict[str, Any]) -> str:
    """The cluster's release without its ``v`` and build suffixes (``v1.35.4+abc`` -> ``1.35.4``)."""
    return str(info["kubernetesVersion"]).lstrip("v").split("-")[0].split("+")[0]


def preflight(info: dict[str, Any], rb: render.RenderedBundle, outside_range_ok: bool = False) -> list[str]:
    """What the cluster ``info`` (from ``describe``) lacks for this bundle: a Kubernetes version
    in every component's range (unless ``outside_range_ok``: an exploratory probe), and GPU
    nodes. Empty when it is fine."""
    problems = []
    kver = release_of(info)
    for c in rb.components:
        rng = rb.lock_component(c.name).get("kubernetes")
        if rng and not outside_range_ok and not versions.satisfies(kver, rng):
            problems.append(f"{c.name} supports Kubernetes {rng}, cluster runs {kver}")
    if not any(n["gpus"] > 0 for n in info["nodes"]):
        problems.append("no node advertises nvidia.com/gpu capacity")
    return problems


def live_and_simulated(prov: providers.ClusterProvider) -> tuple[list[str], list[str]]:
    """Which parts ran as real processes and which were only simulated, in the provider's words
    (nothing from a provider that does not describe its parts, such as an existing cluster)."""
    if not isinstance(prov, providers.DescribesParts):
        return [], []
    return list(prov.live_parts()), list(prov.simulated_parts())


def endpoints(prov: providers.ClusterProvider) -> dict[str, str]:
    """Non-Kubernetes endpoints a provider offers suites (e.g. the Slurm cluster's slurm.conf)."""
    return dict(prov.endpoints()) if isinstance(prov, providers.OffersEndpoints) else {}
