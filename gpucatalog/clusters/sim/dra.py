"""SIM-ONLY: the ResourceSlices NVIDIA's DRA driver for GPUs would publish for a simulated node.

Nothing here is product code; the sim has no GPUs and no NVML, so this stands in for the driver's
kubelet plugin (run by :mod:`.drapublisher`, the image the ``nvidia-dra-driver`` chart names is
mapped to it in ``data/images.yaml``). It builds, from the node's shape (:mod:`..shapes`), its GPUs
as the node folder's hardware state lists them (the sim's NVML: a GPU fallen off the bus is not
published) and the partition profiles of :mod:`..partitions`, the ``resource.k8s.io/v1`` slices of
one pool per node, in the driver's shape: driver ``gpu.nvidia.com``, devices ``gpu-<index>`` with
attributes ``type``, ``uuid``, ``index``, ``minor``, ``productName``, ``brand``, ``architecture``,
``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion``, ``pcieBusID`` and capacity
``memory``. Each GPU is published in one of these modes (the chart's ``gpuSharing.mode``):

* ``exclusive``: one claim per GPU (the driver's default);
* ``shared``: ``allowMultipleAllocations`` with consumable ``memory`` capacity (DRAConsumableCapacity);
* ``partitioned``: a counter set per GPU (``compute-slices``, ``memory-slices``) in the pool's
  first slice, and the whole GPU plus one device per MIG placement (``gpu-<i>-mig-<profile>-<n>``)
  drawing on it (DRAPartitionableDevices), one slice per GPU;
* ``mixed``: the first half of the GPUs shared, the rest partitioned.

A node that gpu-health holds out of service (its state label is not ``healthy``) has every device
tainted ``NoSchedule`` (DRADeviceTaints), so the scheduler allocates none of them to a new claim.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from gpucatalog.clusters import partitions, shapes

DRIVER = "gpu.nvidia.com"
API_VERSION = "resource.k8s.io/v1"
MODES = ("exclusive", "shared", "partitioned", "mixed")
# gpu-health's node state label (a label is the interface: the sim imports nothing of gpuhealth)
HEALTH_STATE_LABEL = "gpu-health.gpu-catalog.io/state"
QUARANTINE_TAINT = "gpu-health.gpu-catalog.io/quarantined"
COMPUTE, MEMORY = "compute-slices", "memory-slices"


def gpu_mode(mode: str, index: int, count: int) -> str:
    """The mode GPU ``index`` of ``count`` is published in under node mode ``mode``."""
    if mode == "mixed":
        return "shared" if index < count // 2 else "partitioned"
    return mode


def _version(v: str, parts: int = 3) -> str:
    """A semver string (``575.57.08`` -> ``575.57.8``, ``12.9`` -> ``12.9.0``): v1 version attributes are semver."""
    nums = [str(int(x)) for x in v.split(".")] + ["0"] * parts
    return ".".join(nums[:parts])


def _gpu_attributes(g: shapes.GpuSpec, gpu: Mapping[str, Any]) -> dict[str, Any]:
    index = int(gpu["index"])
    return {
        "type": {"string": "gpu"},
        "uuid": {"string": str(gpu["uuid"])},
        "index": {"int": index},
        "minor": {"int": index},
        "productName": {"string": g.name},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": g.family.capitalize()},
        "cudaComputeCapability": {"version": f"{g.compute_major}.{g.compute_minor}.0"},
        "driverVersion": {"version": _version(g.driver_version)},
        "cudaDriverVersion": {"version": _version(g.cuda_version)},
        "pcieBusID": {"string": str(gpu["bus_id"]).lower()},
    }


def _mem(mib: int) -> str:
    return f"{mib}Mi"


def counter_set(index: int) -> str:
    return f"gpu-{index}-counter-set"


def _partition_devices(g: shapes.GpuSpec, gpu: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The whole GPU and one device per placement of each profile, all drawing on its counter set."""
    cat = partitions.catalogue()
    index = int(gpu["index"])
    whole = {"name": f"gpu-{index}", "attributes": _gpu_attributes(g, gpu),
             "capacity": {"memory": {"value": _mem(g.memory_mib)}},
             "consumesCounters": [{"counterSet": counter_set(index), "counters": {
                 COMPUTE: {"value": str(cat.compute_slices)}, MEMORY: {"value": str(cat.memory_slices)}}}]}
    out = [whole]
    for p in cat.profiles(g.product):
        for n in range(p.placements):
            attrs = {**_gpu_attributes(g, gpu),
                     "type": {"string": "mig"}, "profile": {"string": p.name},
                     "parentUUID": {"string": str(gpu["uuid"])}, "parentIndex": {"int": index},
                     "uuid": {"string": "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{gpu['uuid']}/{p.name}/{n}"))}}
            out.append({"name": f"gpu-{index}-mig-{p.name.replace('.', '')}-{n}", "attributes": attrs,
                        "capacity": {"memory": {"value": _mem(g.memory_mib * p.memory // cat.memory_slices)}},
                        "consumesCounters": [{"counterSet": counter_set(index), "counters": {
                            COMPUTE: {"value": str(p.compute)}, MEMORY: {"value": str(p.memory)}}}]})
    return out


def _device(g: shapes.GpuSpec, gpu: Mapping[str, Any], shared: bool) -> dict[str, Any]:
    d: dict[str, Any] = {"name": f"gpu-{gpu['index']}", "attributes": _gpu_attributes(g, gpu),
                         "capacity": {"memory": {"value": _mem(g.memory_mib)}}}
    if shared:
        d["allowMultipleAllocations"] = True
    return d


def _taint(devices: list[dict[str, Any]], state: str) -> None:
    for d in devices:
        d["taints"] = [{"key": QUARANTINE_TAINT, "value": state, "effect": "NoSchedule"}]


def slice_specs(node: str, shape: shapes.Shape, gpus: Sequence[Mapping[str, Any]], mode: str,
                health_state: str = "healthy") -> list[dict[str, Any]]:
    """The specs (pool generation left 0) of the node's slices, in a stable order: the counter
    slice (when any GPU is partitioned), the exclusive/shared GPUs, then one slice per
    partitioned GPU. ``gpus`` are the hardware-state GPUs (``index``, ``uuid``, ``bus_id``,
    ``fallen_off_bus``); ``health_state`` is the node's gpu-health state."""
    if mode not in MODES:
        raise ValueError(f"unknown DRA publishing mode {mode!r} (expected one of {', '.join(MODES)})")
    g = shape.gpu
    if g is None:
        return []
    present = [x for x in gpus if not x.get("fallen_off_bus")]
    counters: list[dict[str, Any]] = []
    plain: list[dict[str, Any]] = []
    per_gpu: list[list[dict[str, Any]]] = []
    for gpu in present:
        m = gpu_mode(mode, int(gpu["index"]), g.count)
        if m == "partitioned" and partitions.catalogue().profiles(g.product):
            cat = partitions.catalogue()
            counters.append({"name": counter_set(int(gpu["index"])), "counters": {
                COMPUTE: {"value": str(cat.compute_slices)}, MEMORY: {"value": str(cat.memory_slices)}}})
            per_gpu.append(_partition_devices(g, gpu))
        else:
            plain.append(_device(g, gpu, shared=m in ("shared", "partitioned")))
    if health_state != "healthy":
        for devs in [plain, *per_gpu]:
            _taint(devs, health_state)
    pool = {"name": node, "generation": 0, "resourceSliceCount": 0}
    base = {"driver": DRIVER, "pool": pool}
    specs: list[dict[str, Any]] = []
    if counters:
        # a slice holding the counter sets holds no devices (the API requires it so)
        specs.append({**base, "nodeName": node, "sharedCounters": counters})
    if plain:
        specs.append({**base, "nodeName": node, "devices": plain})
    specs += [{**base, "nodeName": node, "devices": devs} for devs in per_gpu]
    for s in specs:
        s["pool"] = {**pool, "resourceSliceCount": len(specs)}
    return specs


def slice_objects(node: str, specs: Sequence[Mapping[str, Any]], generation: int) -> list[dict[str, Any]]:
    """ResourceSlice objects for ``specs`` at pool ``generation``, named ``<node>-gpu.nvidia.com-<k>``."""
    out = []
    for k, spec in enumerate(specs):
        s = {**spec, "pool": {**spec["pool"], "generation": generation}}
        out.append({"apiVersion": API_VERSION, "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-{DRIVER}-{k}", "labels": {"gpu.nvidia.com/node": node}},
                    "spec": s})
    return out
