"""The narrow cluster-provider protocol and the registry certification picks a provider from.

Called by ``catalog certify --cluster sim|…`` and by tests: ``providers.get("sim", name)``
returns an object with six methods (``available``, ``up``, ``wait_ready``, ``kubeconfig``,
``collect_logs``, ``down``). A conformance suite never sees a provider, only the kubeconfig.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Protocol, runtime_checkable

from gpucatalog.core import errors


@runtime_checkable
class ClusterProvider(Protocol):
    """What certification needs from a cluster, whatever runs it."""

    name: str

    def available(self) -> bool:
        """True when this provider can start a cluster on this machine."""

    def up(self, nodes: int, shape: str) -> Path:
        """Start the cluster with ``nodes`` nodes of ``shape``; returns the kubeconfig path."""

    def wait_ready(self, timeout: float) -> None:
        """Block until the API server answers and every node is Ready (WaitTimeout-like ToolError)."""

    def kubeconfig(self) -> Path:
        """Path of an admin kubeconfig for the running cluster."""

    def collect_logs(self, dest: Path) -> Path:
        """Copy every process log of the cluster into ``dest``; returns the folder written."""

    def down(self) -> None:
        """Stop every process and remove the cluster's state (NotFoundError if none)."""


# provider kind -> "module:Class"; the class is built as Class(cluster_name).
REGISTRY: dict[str, str] = {
    "sim": "gpucatalog.clusters.sim.cluster:SimCluster",
    "kind": "gpucatalog.clusters.kind.cluster:KindCluster",
    "kubeconfig": "gpucatalog.clusters.kubeconfig:KubeconfigCluster",
}


def get(kind: str, cluster_name: str = "sim", kubeconfig: Path | None = None) -> ClusterProvider:
    """The provider ``kind`` for the cluster called ``cluster_name`` (``kubeconfig``: the file of
    an existing cluster, for the ``kubeconfig`` provider)."""
    target = REGISTRY.get(kind)
    if target is None:
        raise errors.NotFoundError(
            f"unknown cluster provider {kind!r}", field="cluster", expected=", ".join(sorted(REGISTRY))
        )
    module_name, _, cls_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    provider: ClusterProvider = cls(kubeconfig) if kind == "kubeconfig" else cls(cluster_name)
    return provider


def unavailable_reason(provider: ClusterProvider) -> str:
    """Why ``provider`` cannot run here (providers may explain themselves with ``reason()``)."""
    reason = getattr(provider, "reason", None)
    return str(reason()) if callable(reason) else "not available on this machine"
