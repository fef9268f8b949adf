"""``upgrade.slurm`` on hand-made Slinky objects and snapshots: partitions and GPU NodeSets are read
from the rendering, and every lost job or partition is named."""

from __future__ import annotations

from typing import Any

import pytest

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.slurm import cli as slurm_cli
from gpucatalog.validators.conformance.upgrade import slurm as upgrade_slurm

CONF = ("GresTypes=gpu\nPartitionName=batch Nodes=h100,h200 PriorityTier=1 Default=YES State=UP\n"
        "PartitionName=priority Nodes=h100,h200 PriorityTier=10 State=UP\n")


def _objects(conf: str = CONF) -> list[dict[str, Any]]:
    def nodeset(name: str, gres: str, replicas: int) -> dict[str, Any]:
        return {"apiVersion": "slinky.slurm.net/v1beta1", "kind": "NodeSet", "metadata": {"name": name},
                "spec": {"extraConf": f"Gres=gpu:{gres}", "replicas": replicas}}
    return [{"apiVersion": "slinky.slurm.net/v1beta1", "kind": "Controller", "metadata": {"name": "slurm"},
             "spec": {"extraConf": conf}}, nodeset("h100", "h100:8", 2), nodeset("h200", "h200:8", 1)]


def _work() -> upgrade_slurm.SlurmWork:
    w = upgrade_slurm.SlurmWork(slurm_cli.Slurm(None), _objects())
    w.running = {"11": "partition batch gpu:h100:8", "12": "partition priority gpu:h100:4"}
    w.pending_id = "13"
    return w


def _snap(**changes: Any) -> upgrade_slurm.Snapshot:
    jobs = {"11": ("RUNNING", "n1", 0), "12": ("RUNNING", "n2", 0), "13": ("PENDING", "", 0)}
    parts = {"batch": {"PartitionName": "batch", "PriorityTier": "1", "State": "UP"},
             "priority": {"PartitionName": "priority", "PriorityTier": "10", "State": "UP"}}
    jobs.update(changes.get("jobs", {}))
    parts.update(changes.get("parts", {}))
    for gone in changes.get("drop", ()):
        parts.pop(gone)
    return upgrade_slurm.Snapshot(jobs, parts)


def test_reads_partitions_and_gpu_types() -> None:
    assert set(upgrade_slurm.partitions(_objects())) == {"batch", "priority"}
    assert upgrade_slurm.gpu_types(_objects()) == [("h100", 8, 2), ("h200", 8, 1)]
    w = _work()
    assert (w.default, w.top, w.t1, w.t2) == ("batch", "priority", "h100", "h200")


def test_a_bundle_without_two_gpu_nodesets_cannot_carry_the_work() -> None:
    with pytest.raises(base.CaseFailed):
        upgrade_slurm.SlurmWork(slurm_cli.Slurm(None), _objects()[:2][:1])


def test_nothing_lost_and_a_new_partition_applied() -> None:
    new = _objects(CONF + "PartitionName=h200 Nodes=h200 PriorityTier=5\n")
    after = _snap(parts={"h200": {"PartitionName": "h200", "PriorityTier": "5", "State": "UP"}})
    assert _work().compare(_snap(), after, new, _objects(), "slurm@0.2.0") == ([], [])


def test_each_loss_is_named() -> None:
    new = _objects(CONF.replace("PriorityTier=10", "PriorityTier=20") + "PartitionName=h200 Nodes=h200 PriorityTier=5\n")
    after = _snap(jobs={"11": ("PENDING", "", 1), "12": ("RUNNING", "n3", 0)}, drop=("batch",))
    work, parts = _work().compare(_snap(), after, new, _objects(), "slurm@0.2.0")
    assert work == ["Slurm job 11 (partition batch gpu:h100:8) is PENDING after the upgrade to slurm@0.2.0 (was RUNNING on n1)",
                    "Slurm job 12 moved from n2 to n3"]
    assert "partition batch did not survive the upgrade to slurm@0.2.0 (PriorityTier 1)" in parts
    assert "partition priority PriorityTier is 10, slurm@0.2.0 renders 20" in parts
    assert "partition h200 of slurm@0.2.0 is not in Slurm after the upgrade (configuration not applied)" in parts
