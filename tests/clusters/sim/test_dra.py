"""The sim DRA publisher's slices: the shape NVIDIA's driver publishes, per mode, from the node
shape catalogue; quarantine taints; a GPU fallen off the bus is not published."""

from __future__ import annotations

import pytest

from gpucatalog.clusters import partitions, shapes
from gpucatalog.clusters.sim import dra, nodefs


def _gpus(shape: str = "h100-80gb-x8") -> list[dict[str, object]]:
    gpus: list[dict[str, object]] = nodefs.healthy_hw(shapes.get(shape), "c", "n0")["gpus"]
    return gpus


def _devices(specs: list[dict[str, object]]) -> list[dict[str, object]]:
    return [d for s in specs for d in s.get("devices", [])]  # type: ignore[attr-defined]


def test_exclusive_gpus_carry_the_driver_attributes_and_memory() -> None:
    specs = dra.slice_specs("n0", shapes.get("h100-80gb-x8"), _gpus(), "exclusive")
    assert len(specs) == 1 and specs[0]["driver"] == "gpu.nvidia.com" and specs[0]["nodeName"] == "n0"
    devs = _devices(specs)
    assert [d["name"] for d in devs] == [f"gpu-{i}" for i in range(8)]
    a = devs[3]["attributes"]
    assert a["productName"] == {"string": "NVIDIA H100 80GB HBM3"} and a["index"] == {"int": 3}
    assert a["uuid"]["string"] == nodefs.gpu_uuid("c", "n0", 3)  # the UUID nvidia-smi prints
    assert a["pcieBusID"] == {"string": "00000000:5d:00.0"} and a["driverVersion"] == {"version": "575.57.8"}
    assert devs[0]["capacity"] == {"memory": {"value": "81559Mi"}}
    assert not any("allowMultipleAllocations" in d for d in devs)


def test_shared_gpus_allow_multiple_allocations() -> None:
    devs = _devices(dra.slice_specs("n0", shapes.get("h100-80gb-x8"), _gpus(), "shared"))
    assert all(d["allowMultipleAllocations"] is True for d in devs) and len(devs) == 8


def test_partitioned_gpus_draw_on_their_counter_set_and_profiles_fit_exactly() -> None:
    specs = dra.slice_specs("n0", shapes.get("h100-80gb-x8"), _gpus(), "partitioned")
    assert "sharedCounters" in specs[0] and "devices" not in specs[0]
    assert len(specs[0]["sharedCounters"]) == 8 and len(specs) == 9
    assert all(s["pool"]["resourceSliceCount"] == 9 for s in specs)
    gpu2 = specs[3]["devices"]
    names = [d["name"] for d in gpu2]
    assert names[0] == "gpu-2" and "gpu-2-mig-1g10gb-6" in names and "gpu-2-mig-7g80gb-0" in names
    cat = partitions.catalogue()
    for p in cat.profiles("NVIDIA-H100-80GB-HBM3"):  # no profile's placements overdraw the GPU
        assert p.compute * p.placements <= cat.compute_slices and p.memory * p.placements <= cat.memory_slices
    whole = gpu2[0]["consumesCounters"][0]
    assert whole == {"counterSet": "gpu-2-counter-set",
                     "counters": {"compute-slices": {"value": "7"}, "memory-slices": {"value": "8"}}}


def test_mixed_shares_the_first_half_and_partitions_the_rest() -> None:
    specs = dra.slice_specs("n0", shapes.get("h200-141gb-x8"), _gpus("h200-141gb-x8"), "mixed")
    shared = [d for d in _devices(specs) if d.get("allowMultipleAllocations")]
    assert [d["name"] for d in shared] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    profiles = {d["attributes"]["profile"]["string"] for d in _devices(specs) if "profile" in d["attributes"]}
    assert "7g.141gb" in profiles and "1g.10gb" not in profiles


def test_quarantined_node_taints_every_device_and_a_lost_gpu_is_not_published() -> None:
    gpus = _gpus()
    gpus[5]["fallen_off_bus"] = True
    specs = dra.slice_specs("n0", shapes.get("h100-80gb-x8"), gpus, "mixed", health_state="quarantined")
    devs = _devices(specs)
    assert not any(d["name"].startswith("gpu-5") for d in devs)
    assert all(d["taints"] == [{"key": dra.QUARANTINE_TAINT, "value": "quarantined", "effect": "NoSchedule"}]
               for d in devs)


def test_unknown_mode_and_cpu_nodes() -> None:
    with pytest.raises(ValueError, match="unknown DRA publishing mode"):
        dra.slice_specs("n0", shapes.get("h100-80gb-x8"), _gpus(), "timesliced")
    assert dra.slice_specs("c0", shapes.get("cpu"), [], "shared") == []


def test_slice_objects_carry_the_pool_generation() -> None:
    specs = dra.slice_specs("n0", shapes.get("h100-80gb-x8"), _gpus(), "mixed")
    objs = dra.slice_objects("n0", specs, 7)
    assert [o["metadata"]["name"] for o in objs][:2] == ["n0-gpu.nvidia.com-0", "n0-gpu.nvidia.com-1"]
    assert {o["spec"]["pool"]["generation"] for o in objs} == {7}
