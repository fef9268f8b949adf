"""Fixtures for the Slurm tests: the rendered charts (real helm) and one live local cluster."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.catalog import executor
from gpucatalog.toolchain import build
from gpucatalog.validators.clusters import slurm

ROOT = Path(__file__).resolve().parents[2]
SHAPES = {"h100-80gb-x8": 8, "h200-141gb-x8": 8, "a100-80gb-x8": 8}


def helm() -> Path:
    path = build.cached("helm")
    if path is None:
        pytest.skip("helm is not built yet (catalog toolchain ensure)")
    return path


def render(chart: str, *set_json: str, values: dict[str, Any] | None = None, tmp: Path | None = None) -> list[dict[str, Any]]:
    argv: list[str] = [str(helm()), "template", chart, str(ROOT / "charts" / chart), "-n", chart]
    if values is not None:
        assert tmp is not None
        f = tmp / f"{chart}-values.yaml"
        f.write_text(yaml.safe_dump(values))
        argv += ["-f", str(f)]
    for s in set_json:
        argv += ["--set-json", s]
    out = executor.run(argv).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def crds() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted((ROOT / "charts/slurm-operator/crds").glob("*.yaml"))]


def have_slurm() -> bool:
    return all(shutil.which(b) for b in ("slurmctld", "slurmd", "munged", "sbatch")) and os.geteuid() == 0


@pytest.fixture(scope="session")
def live_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurm.SlurmCluster]:
    """One cluster for the session: the default slurm chart with two h100 nodes and two h200 nodes."""
    if not have_slurm():
        pytest.skip("Slurm daemons (slurmctld, slurmd, munge) not installed or not root")
    docs = render(
        "slurm",
        'nodesets={"h100":{"enabled":true,"replicas":2,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":8}},'
        '"h200":{"enabled":true,"replicas":1,"shape":"h200-141gb-x8","gpu":{"type":"h200","count":8}}}',
        'partitions={"batch":{"nodesets":["h100","h200"],"priorityTier":1,"default":true},'
        '"priority":{"nodesets":["h100","h200"],"priorityTier":10}}',
    )
    cluster = slurm.SlurmCluster(slurm.from_manifests(docs), tmp_path_factory.mktemp("slurm") / "cluster")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
