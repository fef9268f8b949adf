"""One start per cluster name: a second ``cluster up`` of a name another process is starting gets
exit 2 and touches nothing (it used to take the first's state for stale, remove it, and orphan
both control planes). The first start is played by holding its lock."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from gpucatalog import cli
from gpucatalog.clusters.sim import cluster as sim_cluster


def test_a_second_up_of_a_name_being_started_is_refused_and_touches_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path / "cache"))
    c = sim_cluster.SimCluster("twice")
    c.layout.root.mkdir(parents=True)
    (c.layout.root / "first-start.txt").write_text("the first start's state")
    lock = sim_cluster.clusters_root().with_name("cluster-locks") / "twice.lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the first `up`, still starting
        rc = cli.main(["cluster", "up", "--name", "twice", "--nodes", "2"])
    assert rc == 2
    assert "cluster 'twice' is being started by another process" in capsys.readouterr().err
    assert (c.layout.root / "first-start.txt").read_text() == "the first start's state"
    assert sorted(p.name for p in c.layout.root.iterdir()) == ["first-start.txt"]


def test_a_cache_too_deep_for_the_clusters_sockets_is_refused_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The kernel binds no unix socket whose path is over 107 bytes: ``up`` used to start the
    control plane and then fail in the egress proxy with ``AF_UNIX path too long``."""
    deep = tmp_path / ("d" * 60) / "cache"
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(deep))
    rc = cli.main(["cluster", "up", "--name", "deep", "--nodes", "2"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "the cluster's folder is too deep for its unix socket" in err and "GPU_CATALOG_CACHE" in err
    assert not (deep / "clusters" / "deep").exists()  # nothing of the cluster written (its start lock only)
