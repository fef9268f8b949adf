"""What DRA claims hold of each device, from the API's own objects: the GPUs ResourceSlices offer
(capacity, whether several claims may share one, which counters a partition draws) and the
allocation results of ResourceClaims; and the check that no device and no counter set is ever
given more than it has.

Pure functions over plain JSON dicts (no I/O). Called by the ``gpu_sharing_dra`` suite and its
tests, and by ``bench/dra_allocation.py``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils import quantity

DRIVER = "gpu.nvidia.com"


def amount(q: Any) -> Decimal:
    """A Kubernetes quantity (``40Gi``, ``7``) as a number (bytes for memory)."""
    parse: Any = quantity.parse_quantity  # untyped in the kubernetes package
    value: Decimal = parse(q)
    return value


@dataclass(frozen=True)
class Device:
    pool: str
    name: str
    node: str
    shared: bool  # allowMultipleAllocations
    memory: Decimal  # bytes of the memory capacity (0 when none)
    consumes: Mapping[str, Mapping[str, Decimal]]  # counter set -> counter -> amount
    attributes: Mapping[str, Any]
    tainted: bool

    def attr(self, name: str) -> Any:
        a = self.attributes.get(name) or {}
        return next(iter(a.values()), None) if isinstance(a, dict) else None

    @property
    def key(self) -> tuple[str, str]:
        return (self.pool, self.name)


@dataclass
class Inventory:
    devices: dict[tuple[str, str], Device] = field(default_factory=dict)
    counters: dict[tuple[str, str], dict[str, Decimal]] = field(default_factory=dict)  # (pool, set) -> totals

    def shared(self) -> list[Device]:
        return [d for d in self.devices.values() if d.shared and d.memory > 0]

    def partitions(self) -> list[Device]:
        return [d for d in self.devices.values() if d.consumes and d.attr("type") == "mig"]


def inventory(slices: Iterable[Mapping[str, Any]], driver: str = DRIVER) -> Inventory:
    """The devices and counter sets of ``driver``'s slices (newest pool generation only, as the
    scheduler reads them)."""
    items = [s for s in slices if s["spec"].get("driver") == driver]
    newest: dict[str, int] = {}
    for s in items:
        pool = s["spec"]["pool"]
        newest[pool["name"]] = max(newest.get(pool["name"], 0), int(pool["generation"]))
    inv = Inventory()
    for s in items:
        spec, pool = s["spec"], s["spec"]["pool"]
        if int(pool["generation"]) != newest[pool["name"]]:
            continue
        for cs in spec.get("sharedCounters") or []:
            inv.counters[(pool["name"], cs["name"])] = {k: amount(v["value"]) for k, v in cs["counters"].items()}
        for d in spec.get("devices") or []:
            mem = ((d.get("capacity") or {}).get("memory") or {}).get("value")
            consumes = {c["counterSet"]: {k: amount(v["value"]) for k, v in c["counters"].items()}
                        for c in d.get("consumesCounters") or []}
            inv.devices[(pool["name"], d["name"])] = Device(
                pool=pool["name"], name=d["name"], node=str(spec.get("nodeName") or ""),
                shared=bool(d.get("allowMultipleAllocations")), memory=amount(mem) if mem else Decimal(0),
                consumes=consumes, attributes=d.get("attributes") or {},
                tainted=any(t.get("effect") in ("NoSchedule", "NoExecute") for t in d.get("taints") or []))
    return inv


@dataclass(frozen=True)
class Allocation:
    claim: str  # namespace/name
    pool: str
    device: str
    memory: Decimal | None  # consumedCapacity memory (None: the device's own, not shared)
    share_id: str


def allocations(claims: Iterable[Mapping[str, Any]], driver: str = DRIVER) -> list[Allocation]:
    out = []
    for c in claims:
        results = (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        for r in results:
            if r.get("driver") != driver:
                continue
            mem = (r.get("consumedCapacity") or {}).get("memory")
            out.append(Allocation(claim=f"{c['metadata'].get('namespace')}/{c['metadata']['name']}",
                                  pool=r["pool"], device=r["device"], memory=amount(mem) if mem else None,
                                  share_id=str(r.get("shareID") or "")))
    return out


def kinds(inv: Inventory, allocs: Iterable[Allocation]) -> dict[str, int]:
    """How many allocations were shares of a GPU (a share ID and consumed memory), MIG partitions,
    and whole GPUs. A scheduler that hands a shared claim a whole device of its own counts it as
    whole (KAI v0.16.8 does: docs/kai.md), so a case can ask that every kind occurred."""
    out = {"shared": 0, "partition": 0, "whole": 0}
    for a in allocs:
        dev = inv.devices.get((a.pool, a.device))
        if dev is not None and dev.attr("type") == "mig":
            out["partition"] += 1
        elif a.share_id and a.memory is not None:
            out["shared"] += 1
        else:
            out["whole"] += 1
    return out


def overcommits(inv: Inventory, allocs: Iterable[Allocation]) -> list[str]:
    """Every device given more than it has (memory of a shared device; more than one claim of an
    unshared one) and every counter set drawn past its totals; empty when none."""
    by_device: dict[tuple[str, str], list[Allocation]] = defaultdict(list)
    for a in allocs:
        by_device[(a.pool, a.device)].append(a)
    problems = []
    drawn: dict[tuple[str, str], dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for key, held in sorted(by_device.items()):
        dev = inv.devices.get(key)
        if dev is None:
            problems.append(f"{key[0]}/{key[1]}: allocated to {held[0].claim} but not published")
            continue
        if not dev.shared and len(held) > 1:
            problems.append(f"{dev.pool}/{dev.name}: not shareable, allocated to {len(held)} claims "
                            f"({', '.join(a.claim for a in held)})")
        if dev.shared:
            used = sum((a.memory if a.memory is not None else dev.memory for a in held), Decimal(0))
            if used > dev.memory:
                problems.append(f"{dev.pool}/{dev.name}: memory {used} bytes allocated of {dev.memory}")
        for cs, counters in dev.consumes.items():
            for name, value in counters.items():
                # a partition device is allocated once; its counters are drawn once
                drawn[(dev.pool, cs)][name] += value
    for (pool, cs), taken in sorted(drawn.items()):
        totals = inv.counters.get((pool, cs))
        if totals is None:
            problems.append(f"{pool}/{cs}: counter set drawn on but not published")
            continue
        for name, value in sorted(taken.items()):
            if value > totals.get(name, Decimal(0)):
                problems.append(f"{pool}/{cs}: counter {name} drawn {value} of {totals.get(name, Decimal(0))}")
    return problems
