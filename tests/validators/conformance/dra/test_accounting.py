"""The per-device check of ``gpu_sharing_dra``: allocation results that give a device or a
counter set more than it has are caught (the mixed case fails on them)."""

from __future__ import annotations

from typing import Any

from gpucatalog.clusters import shapes
from gpucatalog.clusters.sim import dra, nodefs
from gpucatalog.validators.conformance.dra import accounting as acc


def _inventory() -> acc.Inventory:
    gpus = nodefs.healthy_hw(shapes.get("h100-80gb-x8"), "c", "n0")["gpus"]
    return acc.inventory(dra.slice_objects("n0", dra.slice_specs("n0", shapes.get("h100-80gb-x8"), gpus, "mixed"), 1))


def _claim(name: str, device: str, memory: str | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"driver": "gpu.nvidia.com", "pool": "n0", "device": device, "request": "gpu"}
    if memory:
        r["consumedCapacity"] = {"memory": memory}
        r["shareID"] = f"share-{name}"
    return {"metadata": {"name": name, "namespace": "t"}, "status": {"allocation": {"devices": {"results": [r]}}}}


def test_inventory_reads_shared_devices_partitions_and_counters() -> None:
    inv = _inventory()
    assert len(inv.shared()) == 4 and len(inv.counters) == 4 and len(inv.partitions()) == 4 * 18


def test_allocations_within_capacity_pass() -> None:
    claims = [_claim("a", "gpu-0", "40Gi"), _claim("b", "gpu-0", "39Gi"), _claim("c", "gpu-4")]
    claims += [_claim(f"m{i}", f"gpu-5-mig-1g10gb-{i}") for i in range(7)]
    assert acc.overcommits(_inventory(), acc.allocations(claims)) == []


def test_shared_memory_overcommit_is_caught() -> None:
    claims = [_claim("a", "gpu-0", "40Gi"), _claim("b", "gpu-0", "40Gi")]
    problems = acc.overcommits(_inventory(), acc.allocations(claims))
    assert len(problems) == 1 and "n0/gpu-0: memory" in problems[0]


def test_partition_counter_overdraw_and_whole_plus_partition_are_caught() -> None:
    claims = [_claim("w", "gpu-4"), _claim("p", "gpu-4-mig-1g10gb-0")]
    problems = acc.overcommits(_inventory(), acc.allocations(claims))
    assert any("gpu-4-counter-set: counter compute-slices drawn 8 of 7" in p for p in problems)


def test_unshared_device_given_twice_is_caught() -> None:
    claims = [_claim("a", "gpu-5-mig-3g40gb-0"), _claim("b", "gpu-5-mig-3g40gb-0")]
    problems = acc.overcommits(_inventory(), acc.allocations(claims))
    assert any("not shareable, allocated to 2 claims" in p for p in problems)


def test_kinds_tell_shares_from_whole_devices_and_partitions() -> None:
    """What the mixed case requires: a scheduler that gives every shared claim a whole device of its
    own and never places a partition (KAI v0.16.8, by hand) shows no share and no partition."""
    inv = _inventory()
    mixed = [_claim("a", "gpu-0", "40Gi"), _claim("c", "gpu-4"), _claim("m", "gpu-5-mig-1g10gb-0")]
    assert acc.kinds(inv, acc.allocations(mixed)) == {"shared": 1, "partition": 1, "whole": 1}
    whole_only = [_claim("a", "gpu-0"), _claim("b", "gpu-1"), _claim("c", "gpu-4")]
    assert acc.kinds(inv, acc.allocations(whole_only)) == {"shared": 0, "partition": 0, "whole": 3}
