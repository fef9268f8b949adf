"""The ``sim`` cluster provider: a real control plane on loopback with simulated GPU nodes."""

from gpucatalog.clusters.sim.cluster import SimCluster, list_clusters

__all__ = ["SimCluster", "list_clusters"]
