"""The ``sim`` cluster provider: a real control plane on loopback with simulated GPU nodes.

``SimCluster`` and ``list_clusters`` are loaded on first use: the modules a pod image carries
(the DRA stand-in for kind imports ``sim.dra``) must not pull in the provider and everything
it drives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpucatalog.clusters.sim.cluster import SimCluster, list_clusters

__all__ = ["SimCluster", "list_clusters"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gpucatalog.clusters.sim import cluster

        return getattr(cluster, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
