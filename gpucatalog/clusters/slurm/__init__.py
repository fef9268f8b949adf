"""A real local Slurm cluster (Debian's slurm-wlm, multiple-slurmd) for the sim provider.

Public API: :func:`from_manifests` reads the rendered ``slurm`` chart; :class:`SlurmCluster`
starts and stops the daemons; :func:`stop_state_dir` cleans a cluster left by a crash.
"""

from __future__ import annotations

from pathlib import Path

from gpucatalog.clusters.slurm import cleanup
from gpucatalog.clusters.slurm.cluster import SlurmCluster
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.clusters.slurm.spec import ClusterSpec, NodeSetSpec, PartitionSpec, from_manifests

__all__ = ["ClusterSpec", "NodeSetSpec", "PartitionSpec", "SlurmCluster", "from_manifests", "stop_state_dir"]


def stop_state_dir(state_dir: Path) -> None:
    """Kill every process of the cluster whose state folder is ``state_dir`` and remove it."""
    cleanup.remove(Layout(Path(state_dir).resolve()))
