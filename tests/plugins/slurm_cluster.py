"""A pytest plugin (loaded by the root conftest): one live local Slurm cluster per test run,
configured from the rendered ``slurm`` chart, for every test that needs real Slurm daemons."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gpucatalog.clusters import slurm
from tests.conftest import REPO, RenderChart

SHAPES = {"h100-80gb-x8": 8, "h200-141gb-x8": 8, "a100-80gb-x8": 8}


def crds() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted((REPO / "charts/slurm-operator/crds").glob("*.yaml"))]


def have_slurm() -> bool:
    return all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged", "sbatch")) and os.geteuid() == 0


@pytest.fixture(scope="session")
def live_cluster(tmp_path_factory: pytest.TempPathFactory, render_chart: RenderChart) -> Iterator[slurm.SlurmCluster]:
    """One cluster for the session: the default slurm chart with two h100 nodes and one h200 node."""
    if not have_slurm():
        pytest.skip("Slurm daemons (slurmctld, slurmd, munge) not installed or not root")
    docs = render_chart("slurm", set_json=[
        'nodesets={"h100":{"enabled":true,"replicas":2,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":8}},'
        '"h200":{"enabled":true,"replicas":1,"shape":"h200-141gb-x8","gpu":{"type":"h200","count":8}}}',
        'partitions={"batch":{"nodesets":["h100","h200"],"priorityTier":1,"default":true},'
        '"priority":{"nodesets":["h100","h200"],"priorityTier":10}}',
    ])
    cluster = slurm.SlurmCluster(slurm.from_manifests(docs), tmp_path_factory.mktemp("slurm") / "cluster")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
