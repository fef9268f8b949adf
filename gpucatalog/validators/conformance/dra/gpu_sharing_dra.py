"""Conformance suite ``gpu_sharing_dra``: fractional GPUs the upstream way, allocated by
kube-scheduler's Dynamic Resource Allocation from the GPUs NVIDIA's DRA driver publishes.

Cases (each in its own namespace, through ResourceClaims/ResourceClaimTemplates and pods only):
``two_halves_share_one_gpu`` (and a third half stays pending with the scheduler's reason),
``oversized_claim_never_schedules``, ``partitions_fill_gpu_exactly`` (one more, or the whole
GPU, does not fit; and the reverse), ``mixed_claims_within_capacity`` (checked per device and
counter set from the allocation results), ``delete_frees_share`` (claim-to-scheduled latency
p50/p95 under churn), ``quarantined_gpu_never_allocated`` (gpu-health's quarantine through
``ctx.params['inject_fault']``; not run without it) and ``bad_claims_named``. Params:
``settle_seconds`` (5: how long "stays pending" is watched), ``churn_rounds`` (10).

Called through ``SUITES`` by the certify pipeline; talks only to the Kubernetes API.
"""

from __future__ import annotations

import statistics
import time
from decimal import Decimal
from typing import Any

from gpucatalog.validators.conformance.dra import accounting as acc
from gpucatalog.validators.conformance.dra import bad_claims as dra_bad_claims
from gpucatalog.validators.conformance.dra import workspace as ws
from gpucatalog.validators.conformance.kit import base, kube_client

NAME = "gpu_sharing_dra"
MI = Decimal(1024 * 1024)
HEALTH_STATE = "gpu-health.gpu-catalog.io/state"
CLAIMS_REASON = "cannot allocate all claims"


def _kube(ctx: base.SuiteContext) -> kube_client.Kube:
    return kube_client.Kube(ctx.kubeconfig)


def _inv(kube: kube_client.Kube) -> acc.Inventory:
    return acc.inventory(ws.slices(kube))


def _mi(b: Decimal) -> str:
    return f"{int(b // MI)}Mi"


def _shared_gpu(inv: acc.Inventory, avoid: set[str] | None = None) -> acc.Device:
    for d in sorted(inv.shared(), key=lambda d: (d.node, d.name)):
        if not d.tainted and d.node not in (avoid or set()):
            return d
    raise base.CaseFailed("no untainted GPU of driver gpu.nvidia.com allows multiple allocations with a memory "
                          f"capacity (allowMultipleAllocations): {len(inv.devices)} device(s) published")


def _partitioned_gpu(inv: acc.Inventory) -> tuple[acc.Device, list[acc.Device]]:
    """A whole GPU that draws on a counter set, and the partitions drawing on the same set."""
    for d in sorted(inv.devices.values(), key=lambda d: (d.node, d.name)):
        if d.attr("type") == "gpu" and d.consumes and not d.tainted:
            cs = next(iter(d.consumes))
            parts = [p for p in inv.partitions() if p.pool == d.pool and cs in p.consumes]
            if parts:
                return d, parts
    raise base.CaseFailed("no GPU of driver gpu.nvidia.com is published with partitions drawing on its "
                          "counters (sharedCounters + consumesCounters)")


def preflight(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    kube = _kube(ctx)
    for dc in (ws.GPU_CLASS, ws.MIG_CLASS):
        if not kube.request("GET", f"{ws.RESOURCE}/deviceclasses/{dc}", ok404=True):
            raise base.CaseFailed(f"DeviceClass {dc} does not exist (NVIDIA's DRA driver installs it)")
    gpu_nodes = {n["metadata"]["name"] for n in kube.request(
        "GET", "/api/v1/nodes", query={"labelSelector": "nvidia.com/gpu.present=true"})["items"]}

    def published() -> acc.Inventory | None:
        found = _inv(kube)
        return found if found.devices and gpu_nodes <= {d.node for d in found.devices.values()} else None

    inv = base.wait_for("ResourceSlices of driver gpu.nvidia.com for every GPU node", published, ctx.scaled(60), 1.0)
    res.details.update(devices=len(inv.devices), shared=len(inv.shared()), partitions=len(inv.partitions()),
                       counter_sets=len(inv.counters), nodes=len({d.node for d in inv.devices.values()}))


def two_halves_share_one_gpu(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    kube = _kube(ctx)
    gpu = _shared_gpu(_inv(kube))
    half = _mi(gpu.memory / 2)
    with ws.space(kube, ctx, NAME) as sp:
        sp.template("half", ws.shared_request(half, str(gpu.attr("uuid"))))
        halves = ["half-1", "half-2", "half-3"]
        for p in halves:
            sp.pod(p, template="half")
        # the three ask alike: which two the scheduler places first is its choice
        placed = sp.wait_some_scheduled(halves, 2)
        third = next(p for p in halves if p not in placed)
        reason = sp.stays_pending(third)
        allocs = [a for p in placed for a in acc.allocations([sp.pod_claim(p)])]
        res.details.update(device=f"{gpu.pool}/{gpu.name}", half=half, allocations=[
            {"claim": a.claim, "device": f"{a.pool}/{a.device}", "memory": _mi(a.memory or gpu.memory),
             "shareID": a.share_id} for a in allocs], third_pending={"pod": third, "reason": reason})
        if {(a.pool, a.device) for a in allocs} != {gpu.key} or len(allocs) != 2:
            raise base.CaseFailed(f"the two half claims were not both allocated {gpu.pool}/{gpu.name}: {allocs}")
        if len({a.share_id for a in allocs}) != 2 or any(a.memory != acc.amount(half) for a in allocs):
            raise base.CaseFailed(f"the two shares of {gpu.name} are not distinct {half} shares: {allocs}")
        if CLAIMS_REASON not in reason:
            raise base.CaseFailed(f"third claim pending without the scheduler's claim reason: {reason!r}")


def oversized_claim_never_schedules(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    kube = _kube(ctx)
    inv = _inv(kube)
    largest = max((d.memory for d in inv.devices.values()), default=Decimal(0))
    if not largest:
        raise base.CaseFailed("no device publishes a memory capacity")
    too_big = _mi(largest + 1024 * MI)
    with ws.space(kube, ctx, NAME) as sp:
        sp.template("huge", ws.shared_request(too_big))
        sp.pod("huge", template="huge")
        reason = sp.stays_pending("huge")
        res.details.update(requested=too_big, largest_capacity=_mi(largest), reason=reason)
        if CLAIMS_REASON not in reason:
            raise base.CaseFailed(f"claim for memory {too_big} (largest device capacity {_mi(largest)}) pending "
                                  f"without the scheduler's claim reason: {reason!r}")
        res.reason = f"memory {too_big} requested > largest device capacity {_mi(largest)}: {reason}"


def _fill_partitions(sp: ws.Space, whole: acc.Device, parts: list[acc.Device]) -> dict[str, Any]:
    """Fill ``whole``'s counters with its smallest-compute profile; one more partition and the
    whole GPU must then stay pending."""
    cs = next(iter(whole.consumes))
    total = whole.consumes[cs]
    by_profile: dict[str, list[acc.Device]] = {}
    for p in parts:
        by_profile.setdefault(str(p.attr("profile")), []).append(p)
    # the profile whose placements exactly use up one counter of the GPU
    fill = next((name for name, devs in sorted(by_profile.items())
                 if any(devs[0].consumes[cs][k] * len(devs) == total[k] for k in total)), None)
    if fill is None:
        raise base.CaseFailed(f"no partition profile of {whole.name} fills its counters exactly: {sorted(by_profile)}")
    n = len(by_profile[fill])
    uuid = str(whole.attr("uuid"))
    for i in range(n):
        sp.claim(f"part-{i}", ws.partition_request(fill, uuid))
        sp.pod(f"part-{i}", claim=f"part-{i}")
    for i in range(n):
        sp.wait_scheduled(f"part-{i}")
    other = next(name for name in sorted(by_profile) if name != fill)
    sp.claim("one-more", ws.partition_request(other, uuid))
    sp.pod("one-more", claim="one-more")
    sp.claim("whole", ws.whole_request(uuid))
    sp.pod("whole", claim="whole")
    return {"profile": fill, "partitions": n, "one_more": other, "one_more_pending": sp.stays_pending("one-more", 0.6),
            "whole_pending": sp.stays_pending("whole", 0.2)}


def partitions_fill_gpu_exactly(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    kube = _kube(ctx)
    whole, parts = _partitioned_gpu(_inv(kube))
    with ws.space(kube, ctx, NAME) as sp:
        res.details["fill"] = _fill_partitions(sp, whole, parts)
        _no_overcommit(sp, kube)
    with ws.space(kube, ctx, NAME) as sp:
        uuid = str(whole.attr("uuid"))
        sp.claim("whole", ws.whole_request(uuid))
        sp.pod("whole", claim="whole")
        sp.wait_scheduled("whole")
        profile = str(parts[0].attr("profile"))
        sp.claim("part", ws.partition_request(profile, uuid))
        sp.pod("part", claim="part")
        res.details["whole_first"] = {"gpu": f"{whole.pool}/{whole.name}", "partition_pending": sp.stays_pending("part", 0.6)}
        _no_overcommit(sp, kube)


def _no_overcommit(sp: ws.Space, kube: kube_client.Kube) -> list[acc.Allocation]:
    allocs = acc.allocations(sp.claims())
    problems = acc.overcommits(_inv(kube), allocs)
    if problems:
        raise base.CaseFailed("devices given more than they have: " + "; ".join(problems[:5]))
    return allocs


def mixed_claims_within_capacity(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    kube = _kube(ctx)
    inv = _inv(kube)
    gpu = _shared_gpu(inv)
    node = gpu.node
    here = [d for d in inv.devices.values() if d.node == node]
    profiles = sorted({str(d.attr("profile")) for d in here if d.attr("type") == "mig"})
    quarter = _mi(gpu.memory / 4)
    # more than the node holds (every profile three times alone draws more compute slices than a
    # few GPUs have), so that capacity, not demand, decides what is allocated
    asks: list[tuple[str, dict[str, Any]]] = []
    for i in range(3):
        asks += [(f"whole-{i}", ws.whole_request()), (f"half-{i}", ws.shared_request(_mi(gpu.memory / 2))),
                 (f"quarter-{i}", ws.shared_request(quarter)), (f"quarter-{i}b", ws.shared_request(quarter))]
        asks += [(f"mig-{p.replace('.', '')}-{i}", ws.partition_request(p)) for p in profiles]
    with ws.space(kube, ctx, NAME) as sp:
        for name, req in asks:
            sp.claim(name, req)
            sp.pod(name, claim=name, node=node)
        # settle: until no more pods get scheduled for a few seconds
        last, stable_since = -1, time.monotonic()
        deadline = time.monotonic() + ctx.scaled(120)
        while time.monotonic() - stable_since < 5 and time.monotonic() < deadline:
            bound = sum(1 for c in sp.claims() if (c.get("status") or {}).get("allocation"))
            if bound != last:
                last, stable_since = bound, time.monotonic()
            time.sleep(0.5)
        allocs = _no_overcommit(sp, kube)
        kinds = acc.kinds(_inv(kube), allocs)
        res.details.update(node=node, claims=len(asks), allocated=len({a.claim for a in allocs}),
                           devices_used=len({(a.pool, a.device) for a in allocs}), allocated_by_kind=kinds)
        if len({a.claim for a in allocs}) in (0, len(asks)):
            raise base.CaseFailed(f"{len({a.claim for a in allocs})} of {len(asks)} claims allocated: the case needs "
                                  "some allocated and some left over to prove capacity holds")
        # no overcommit proves nothing about a kind never allocated; whole GPUs may rightly lose
        # the race for devices to the shares and partitions asked for at the same time
        missing = [k for k in ("shared", "partition") if kinds[k] == 0]
        if missing:
            raise base.CaseFailed(f"no {' or '.join(missing)} allocation among {len(allocs)} (by kind: {kinds}): "
                                  "the mix was not allocated as asked, so capacity was not shown to hold for it")


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3)


def delete_frees_share(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    kube = _kube(ctx)
    gpu = _shared_gpu(_inv(kube))
    rounds = int(ctx.params.get("churn_rounds", 10))
    with ws.space(kube, ctx, NAME) as sp:
        sp.template("half", ws.shared_request(_mi(gpu.memory / 2), str(gpu.attr("uuid"))))
        running = ["c-0", "c-1"]
        for p in running:
            sp.pod(p, template="half")
            sp.wait_scheduled(p)
        latencies = []
        for i in range(2, rounds + 2):
            name = f"c-{i}"
            t0 = time.monotonic()
            sp.pod(name, template="half")
            sp.stays_pending(name, 0.2)
            sp.delete_pod(running.pop(0))
            t1 = time.monotonic()
            sp.wait_scheduled(name, 60)
            latencies.append(time.monotonic() - t1)
            running.append(name)
            del t0
        res.details.update(device=f"{gpu.pool}/{gpu.name}", rounds=rounds,
                           delete_to_scheduled_p50_s=_pct(latencies, 0.5), delete_to_scheduled_p95_s=_pct(latencies, 0.95),
                           delete_to_scheduled_max_s=round(max(latencies), 3), mean_s=round(statistics.mean(latencies), 3))


def quarantined_gpu_never_allocated(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    inject = ctx.params.get("inject_fault")
    if not callable(inject):
        raise base.CaseNotRun("the cluster offers no fault injection (ctx.params['inject_fault'])")
    kube = _kube(ctx)
    gpu = _shared_gpu(_inv(kube))
    node = gpu.node

    def tainted(want: bool) -> bool:
        devs = [d for d in _inv(kube).devices.values() if d.node == node]
        return bool(devs) and all(d.tainted == want for d in devs)

    inject(node, "row-remap-failure", gpu=0)
    try:
        base.wait_for(f"{node} quarantined by gpu-health", lambda: kube.request("GET", f"/api/v1/nodes/{node}")
                      ["metadata"].get("labels", {}).get(HEALTH_STATE, "healthy") != "healthy", ctx.scaled(90), 0.5)
        base.wait_for(f"every device of {node} tainted by the DRA driver", lambda: tainted(True), ctx.scaled(30), 0.5)
        with ws.space(kube, ctx, NAME) as sp:
            sp.claim("q", ws.shared_request(_mi(gpu.memory / 4)))
            sp.pod("q", claim="q", node=node)
            reason = sp.stays_pending("q")
            res.details.update(node=node, pending_reason=reason)
            inject(node, "clear")
            _release(kube, ctx, node)
            base.wait_for(f"devices of {node} untainted after verification", lambda: tainted(False), ctx.scaled(60), 0.5)
            res.details["allocated_after_return_to"] = sp.wait_scheduled("q", 60)
    finally:
        inject(node, "clear")
        _release(kube, ctx, node)


def _release(kube: kube_client.Kube, ctx: base.SuiteContext, node: str) -> None:
    """Back in service: resolved as a technician would, then gpu-health's verification."""
    def back() -> bool:
        n = kube.request("GET", f"/api/v1/nodes/{node}")
        state = n["metadata"].get("labels", {}).get(HEALTH_STATE, "healthy")
        if state in ("hardware-repair", "escalated"):
            kube.request("PATCH", f"/api/v1/nodes/{node}",
                         {"metadata": {"annotations": {"gpu-health.gpu-catalog.io/resolved": "true"}}},
                         content_type="application/merge-patch+json")
        return state == "healthy" and not n["spec"].get("unschedulable")

    base.wait_for(f"{node} back in service", back, ctx.scaled(180), 1.0)


CASES: list[tuple[str, base.Case]] = [
    ("two_halves_share_one_gpu", two_halves_share_one_gpu),
    ("oversized_claim_never_schedules", oversized_claim_never_schedules),
    ("partitions_fill_gpu_exactly", partitions_fill_gpu_exactly),
    ("mixed_claims_within_capacity", mixed_claims_within_capacity),
    ("delete_frees_share", delete_frees_share),
    ("quarantined_gpu_never_allocated", quarantined_gpu_never_allocated),
]


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    result = base.run_with_preflight(NAME, ctx, preflight, [*CASES, ("bad_claims_named", dra_bad_claims.case)])
    ws.await_namespaces_gone(_kube(ctx), ctx, NAME, result)
    return result


# the case names as evidence records them (read by the AI-conformance mapping's validation)
CASE_NAMES = (*(name for name, _fn in CASES), "bad_claims_named")
