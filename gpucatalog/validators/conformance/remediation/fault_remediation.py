"""Conformance suite ``fault_remediation``: gpu-health turns injected GPU faults into node
conditions, Events and a safe cordon -> drain -> repair -> verify -> uncordon cycle.

Talks only to the Kubernetes API plus the fault-injection callable the runner passes in
``ctx.params["inject_fault"]`` — ``inject_fault(node, kind, **kw)`` with kinds ``xid`` (``code``,
``gpu``), ``row-remap-pending``, ``row-remap-failure``, ``pcie-downgrade`` (``gpu``: that GPU
busy on a narrowed link), ``ib-rate`` and ``clear`` (on the sim cluster:
``SimCluster.inject_fault`` / ``catalog cluster inject-fault``; elsewhere, with ``catalog certify
--inject-faults``, :mod:`pod_injector`, which writes XIDs only and reports the other kinds as not
run). A case whose fault cannot be injected is not run, which leaves the suite incomplete, never
passed. Other params:
``gpu_health_namespace`` (default ``gpu-health``), ``node_selector`` (GPU nodes, default
``nvidia.com/gpu.present=true``), ``idle_observe_s`` (how long an idle node is watched at least, default
6 agent intervals; the watch goes on until the agent reported 4 times). Other observation
windows are a number of gpu-health controller passes (``Env.passes``), from the interval the
bundle installs. The observable contract it checks (label, annotations,
condition types, breaker ConfigMap) is written down in ``remediation.contract``, on purpose not
imported from the implementation; ``remediation.env`` holds what every case works with. Needs at
least 4 GPU nodes.
"""

from __future__ import annotations

import concurrent.futures
import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.remediation import contract as rc
from gpucatalog.validators.conformance.remediation import env as remediation_env

NAME = "fault_remediation"
# distinct agent reports an idle node is watched over before it counts as judged
IDLE_REPORTS = 4


# --- cases --------------------------------------------------------------------------------
def case_agents_report(env: remediation_env.Env, res: base.CaseResult) -> None:
    """Every GPU node carries gpu-health's conditions (the agent DaemonSet runs everywhere)."""
    for node in env.nodes:
        env.wait_node(node, "GpuXidError condition present", lambda n: bool(rc.condition(n, "GpuXidError")), 120)
    env.reset_breaker()
    for node in env.nodes:
        env.ensure_healthy(node)
    res.details["fault_history_cleared"] = env.forget_fault_history()
    res.details["gpu_nodes"] = len(env.nodes)


def case_idle_gpus_never_quarantined(env: remediation_env.Env, res: base.CaseResult) -> None:
    """GPUs idling between jobs down-train their PCIe link (gen 1, sometimes narrower) and that is
    no fault: over several agent cycles on a node that runs no work, gpu-health reports no PCIe
    fault (no True condition, no PCIe Warning Event) and never cordons it."""
    node = env.nodes[0]
    env.ensure_healthy(node)
    t0 = time.time()
    beats: set[str] = set()
    seen_idle_note = False

    def still_idle_and_untouched() -> bool:
        nonlocal seen_idle_note
        n = env.node(node)
        pc = rc.condition(n, rc.PCIE)
        if pc.get("status") == "True":
            raise base.CaseFailed(f"idle node reported {rc.PCIE}=True: {pc.get('message', '')[:300]}")
        if rc.cordoned(n) or rc.state(n) != "healthy":
            raise base.CaseFailed(f"idle node left service: state {rc.state(n)}, cordoned={rc.cordoned(n)}")
        if pc.get("lastHeartbeatTime"):
            beats.add(str(pc["lastHeartbeatTime"]))
        seen_idle_note |= "not judged" in str(pc.get("message", ""))
        return True

    # Watched until the agent has judged the node several times (distinct reports), and at least
    # the window: a slow agent makes the watch longer, never shorter than what it proves.
    window = float(env.ctx.params.get("idle_observe_s", env.passes(IDLE_REPORTS + 2, "agent")))
    watch_from = time.monotonic()

    def judged_often_enough() -> bool | None:
        still_idle_and_untouched()
        return (len(beats) >= IDLE_REPORTS and time.monotonic() - watch_from >= window) or None

    base.wait_for(f"{node} watched idle over {IDLE_REPORTS} agent reports of {rc.PCIE} (no fault, not cordoned); "
                  "fewer reports mean nothing was judged", judged_often_enough,
                  env.ctx.scaled(max(60.0, 3 * window)))
    res.details["idle_reports_seen"] = len(beats)
    # An agent reports a finding once (one Event per finding, never refreshed), so a PCIe Event it
    # raised about this idle node before the watch began is as much a wrong verdict: all count
    # (a correct agent never raises one on an idle node, so earlier runs leave none behind).
    events = [e for reason in rc.PCIE_REASONS for e in env.events(node, reason, since=0.0)]
    if events:
        raise base.CaseFailed(f"idle node got PCIe Warning Events: {[e.get('message', '')[:200] for e in events]}")
    res.details.update({"node": node, "agent_readings": len(beats), "idle_link_recorded_not_judged": seen_idle_note,
                        "observed_s": round(time.time() - t0, 1)})


def case_busy_narrowed_link_quarantined(env: remediation_env.Env, res: base.CaseResult) -> None:
    """A GPU busy on a link narrower than the node shape's (the sim: P0 at x8 of x16) is a fault
    once the agent has seen it over consecutive busy readings: GpuPcieDegraded=True asking for
    hardware repair, and the node is cordoned and parked for a technician."""
    node = env.nodes[3]
    env.ensure_healthy(node)
    t0 = time.time()
    env.inject(node, "pcie-downgrade", gpu=4)
    try:
        env.wait_node(node, f"{rc.PCIE}=True (PcieWidthDegraded)", lambda n: (
            rc.condition(n, rc.PCIE).get("status") == "True"
            and rc.condition(n, rc.PCIE).get("reason") == "PcieWidthDegraded"), 60)
        detected = time.time()
        msg = rc.condition(env.node(node), rc.PCIE)["message"]
        if not msg.startswith("action=HARDWARE_REPAIR;") or "GPU 4 " not in msg:
            raise base.CaseFailed(f"condition does not name GPU 4 and ask for hardware repair: {msg[:300]}")
        env.wait_node(node, "cordoned by gpu-health and parked for hardware repair", lambda n: (
            rc.cordoned(n) and rc.annots(n).get(rc.CORDONED_BY) == "gpu-health"
            and rc.state(n) == "hardware-repair"), 60)
        res.details.update({"node": node, "detected_after_s": round(detected - t0, 2),
                            "quarantined_after_s": round(time.time() - t0, 2), "message": msg[:300]})
    finally:
        env.cleanup(node)
        env.release(node)


def _workload(env: remediation_env.Env, ns: str, node: str, other: str) -> None:
    """One pod on the faulty node and one elsewhere, under a PDB that first forbids any eviction."""
    k = env.kube
    k.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for name, where in (("on-faulty", node), ("elsewhere", other)):
        k.request("POST", f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "training"}},
            "spec": {"nodeName": where, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                     "tolerations": [{"operator": "Exists"}]}})
    k.request("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "training"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "training"}}}})
    base.wait_for("workload pods Ready and PDB observed", lambda: (
        all(c.get("type") != "Ready" or c.get("status") == "True"
            for p in k.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
            for c in (p.get("status") or {}).get("conditions") or [])
        and len(k.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]) == 2
        and (k.request("GET", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/training").get("status") or {})
        .get("currentHealthy") == 2), env.ctx.scaled(60))


def case_xid79_full_cycle(env: remediation_env.Env, res: base.CaseResult) -> None:
    node, other = env.nodes[0], env.nodes[1]
    ns = f"fault-remediation-{uuid.uuid4().hex[:6]}"
    k = env.kube
    env.ensure_healthy(node)
    _workload(env, ns, node, other)
    steps: dict[str, str] = {}
    t0 = time.time()
    try:
        steps["injected"] = rc.now_iso()
        env.inject(node, "xid", code=79, gpu=2)  # inside the try: the workload goes when it cannot run
        env.wait_node(node, "GpuXidError=True naming XID 79", lambda n: (
            rc.condition(n, "GpuXidError").get("status") == "True"
            and "XID 79" in rc.condition(n, "GpuXidError").get("message", "")), 60)
        steps["condition"] = rc.now_iso()
        msg = rc.condition(env.node(node), "GpuXidError")["message"]
        if "PCI 0000:" not in msg or "action=REBOOT" not in msg:
            raise base.CaseFailed(f"condition message lacks the GPU's PCI address or the action: {msg[:200]}")
        # the index is known when the agent saw the GPU before it fell off the bus
        res.details["condition_names_gpu_index"] = "GPU 2 " in msg
        env.wait_node(node, "cordoned by gpu-health", lambda n: rc.cordoned(n) and rc.annots(n).get(rc.CORDONED_BY) == "gpu-health", 30)
        steps["cordoned"] = rc.now_iso()
        env.wait_node(node, "draining", lambda n: rc.state(n) == "draining", 30)
        # the PDB allows no disruption: the pod must still be there after several drain passes
        time.sleep(env.passes(4))
        pod = k.request("GET", f"/api/v1/namespaces/{ns}/pods/on-faulty", ok404=True)
        if not pod or (pod.get("metadata") or {}).get("deletionTimestamp"):
            raise base.CaseFailed("pod evicted although its PodDisruptionBudget allowed no disruption")
        if rc.state(env.node(node)) != "draining":
            raise base.CaseFailed(f"left draining while the PDB blocked eviction (state {rc.state(env.node(node))})")
        steps["pdb_blocked_checked"] = rc.now_iso()
        k.request("PATCH", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/training",
               {"spec": {"minAvailable": 1}}, content_type="application/merge-patch+json")
        steps["pdb_relaxed"] = rc.now_iso()
        base.wait_for("pod on the faulty node evicted", lambda: not k.request(
            "GET", f"/api/v1/namespaces/{ns}/pods/on-faulty", ok404=True), env.ctx.scaled(60))
        steps["evicted"] = rc.now_iso()
        if not k.request("GET", f"/api/v1/namespaces/{ns}/pods/elsewhere", ok404=True):
            raise base.CaseFailed("the pod on a healthy node was evicted too")
        env.wait_node(node, "back in service (healthy, uncordoned)", lambda n: rc.state(n) == "healthy" and not rc.cordoned(n),
                      env.back_in_service_s())
        steps["uncordoned"] = rc.now_iso()
        tl = rc.timeline(env.node(node))
        for key in ("quarantined", "draining", "repairing", "verifying", "healthy"):
            if key not in tl:
                raise base.CaseFailed(f"controller timeline lacks step {key!r}: {tl}")
        repair = [e for e in env.events(node, "RepairStarted", t0) if "REBOOT" in e.get("message", "")]
        if not repair:
            raise base.CaseFailed("no RepairStarted event for REBOOT")
        res.details.update({"node": node, "checkpoints": steps, "controller_timeline": tl,
                            "steps": rc.as_steps({**steps, **tl}, t0),
                            "fault_to_back_in_service_s": round(time.time() - t0, 2)})
    finally:
        k.request("DELETE", f"/api/v1/namespaces/{ns}", ok404=True)
        env.cleanup(node)
        env.release(node)


def case_application_xid_event_only(env: remediation_env.Env, res: base.CaseResult) -> None:
    node = env.nodes[3]
    env.ensure_healthy(node)
    t0 = time.time()
    try:
        env.inject(node, "xid", code=13, gpu=1)
        env.inject(node, "xid", code=43, gpu=1)
        for reason in ("Xid13", "Xid43"):
            base.wait_for(f"{node}: Event {reason}", lambda r=reason: env.events(node, r, t0), env.ctx.scaled(60))  # type: ignore[misc]
        res.details["events_at"] = rc.now_iso()

        def untouched() -> bool:
            n = env.node(node)
            if rc.cordoned(n) or rc.state(n) != "healthy":
                raise base.CaseFailed(f"application XID led to {rc.state(n)}/cordon")
            if rc.condition(n, "GpuXidError").get("status") != "False":
                raise base.CaseFailed(f"application XID raised GpuXidError: {rc.condition(n, 'GpuXidError')}")
            return True

        base.holds(f"{node} untouched", untouched, env.passes(6))  # several controller passes
        res.details["node"] = node
    finally:
        env.cleanup(node)


def _repair_path(env: remediation_env.Env, res: base.CaseResult, kind: str, want_action: str, node: str) -> dict[str, Any]:
    env.ensure_healthy(node)
    t0 = time.time()
    env.inject(node, kind, gpu=3)
    env.wait_node(node, "GpuMemoryError=True", lambda n: rc.condition(n, "GpuMemoryError").get("status") == "True", 60)
    env.wait_node(node, f"repair action {want_action}", lambda n: rc.annots(n).get(rc.ACTION) == want_action, 60)
    res.details.update({"node": node, "action": want_action, "action_chosen_after_s": round(time.time() - t0, 2)})
    return {"node": node, "t0": t0}


def case_pending_remap_gpu_reset(env: remediation_env.Env, res: base.CaseResult) -> None:
    info = _repair_path(env, res, "row-remap-pending", "RESET_GPU", env.nodes[1])
    node = info["node"]
    try:
        env.wait_node(node, "back in service", lambda n: rc.state(n) == "healthy" and not rc.cordoned(n),
                      env.back_in_service_s())
        res.details["back_in_service_s"] = round(time.time() - info["t0"], 2)
        res.details["controller_timeline"] = rc.timeline(env.node(node))
    finally:
        env.cleanup(node)
        env.release(node)


def case_failed_remap_hardware_repair(env: remediation_env.Env, res: base.CaseResult) -> None:
    info = _repair_path(env, res, "row-remap-failure", "HARDWARE_REPAIR", env.nodes[2])
    node = info["node"]
    try:
        env.wait_node(node, "state hardware-repair", lambda n: rc.state(n) == "hardware-repair", 60)
        time.sleep(env.passes(4))  # parked: several controller passes leave it cordoned
        n = env.node(node)
        if not rc.cordoned(n) or rc.state(n) != "hardware-repair":
            raise base.CaseFailed(f"hardware-repair node did not stay cordoned: {rc.state(n)}, cordoned={rc.cordoned(n)}")
        if not env.events(node, "HardwareRepairRequested", info["t0"]):
            raise base.CaseFailed("no HardwareRepairRequested event")
        res.details["stayed_cordoned"] = True
        # the technician replaces the GPU and marks the node resolved; gpu-health verifies and releases it
        env.clear(node)
        env.patch_node(node, {"metadata": {"annotations": {rc.RESOLVED: "true"}}})
        env.wait_node(node, "released after resolution", lambda n: rc.state(n) == "healthy" and not rc.cordoned(n),
                      env.back_in_service_s())
        res.details["released_after_resolution"] = True
    finally:
        env.cleanup(node)
        env.release(node)


def case_ib_half_rate(env: remediation_env.Env, res: base.CaseResult) -> None:
    node = env.nodes[1]
    env.ensure_healthy(node)
    try:
        env.inject(node, "ib-rate")
        env.wait_node(node, "InfinibandDegraded=True (rate)", lambda n: (
            rc.condition(n, "InfinibandDegraded").get("status") == "True"
            and rc.condition(n, "InfinibandDegraded").get("reason") == "InfinibandRateDegraded"), 60)
        res.details["message"] = rc.condition(env.node(node), "InfinibandDegraded")["message"][:300]
        # a degraded fabric port is acted on like any other fault (default action: reboot)
        env.wait_node(node, "quarantined for the degraded port",
                      lambda n: rc.annots(n).get(rc.CORDONED_BY) == "gpu-health", 30)
        res.details["quarantined"] = True
    finally:
        env.cleanup(node)
        env.release(node)


def case_breaker_caps_quarantines(env: remediation_env.Env, res: base.CaseResult) -> None:
    env.reset_breaker()
    # the last nodes: the earlier cases used the first ones (a fourth fault on one node in a day
    # would rightly be sent to hardware repair as a flapping node)
    targets = env.nodes[-math.ceil(len(env.nodes) * 0.6):]  # at least 60 %: 3 of 4 nodes is 75 %
    res.details["faulty_share"] = round(len(targets) / len(env.nodes), 3)
    for node in targets:
        env.ensure_healthy(node)
    quarantined: set[str] = set()  # every node seen quarantined by gpu-health during the wait
    refused: set[str] = set()

    def settled() -> bool:
        # accumulated: a node quarantined first may be repaired and back before the last refusal
        for x in targets:
            n = env.node(x)
            if rc.cordoned(n) and rc.annots(n).get(rc.CORDONED_BY) == "gpu-health":
                quarantined.add(x)
            if rc.annots(n).get(rc.SKIPPED) == "circuit-breaker-open":
                refused.add(x)
        return quarantined | refused >= set(targets)

    try:
        # the faults land together, as when one event hits most nodes: an injector that takes
        # seconds per fault (a pod) would otherwise let the first node's repair finish before the
        # last fault arrives
        with concurrent.futures.ThreadPoolExecutor(len(targets)) as pool:
            list(pool.map(lambda x: env.inject(x, "xid", code=79, gpu=0), targets))
        base.wait_for("every faulty node either quarantined or refused by the breaker", settled, env.ctx.scaled(60))
        data = env.breaker()
        limit = int(data.get("limit", "0"))
        res.details.update({"faulty": len(targets), "limit": limit, "quarantined": len(quarantined),
                            "refused": len(refused), "breaker": data.get("status")})
        if not 0 < len(quarantined) <= limit:
            raise base.CaseFailed(f"{len(quarantined)} nodes quarantined, breaker limit {limit}")
        if data.get("status") != "TRIPPED":
            raise base.CaseFailed(f"breaker {data.get('status')}, refused {sorted(refused)}")
    finally:
        for node in targets:
            env.cleanup(node)
        for node in targets:
            env.release(node)
        env.reset_breaker()


def case_manual_cordon_respected(env: remediation_env.Env, res: base.CaseResult) -> None:
    node = env.nodes[2]
    env.ensure_healthy(node)
    env.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        env.inject(node, "xid", code=79, gpu=1)
        env.wait_node(node, "GpuXidError=True", lambda n: rc.condition(n, "GpuXidError").get("status") == "True", 60)
        env.wait_node(node, "skipped as cordoned by someone else",
                      lambda n: rc.annots(n).get(rc.SKIPPED) == "cordoned-by-someone-else", 30)
        env.clear(node)
        env.wait_node(node, "fault condition cleared", lambda n: rc.condition(n, "GpuXidError").get("status") == "False", 60)
        time.sleep(env.passes(4))  # several controller passes after the fault cleared
        n = env.node(node)
        if not rc.cordoned(n) or rc.state(n) != "healthy" or rc.CORDONED_BY in rc.annots(n):
            raise base.CaseFailed(f"manually cordoned node was touched: state={rc.state(n)} cordoned={rc.cordoned(n)}")
        res.details["stayed_cordoned"] = True
    finally:
        env.cleanup(node)
        env.patch_node(node, {"spec": {"unschedulable": False}})


CASES: list[tuple[str, Callable[[remediation_env.Env, base.CaseResult], None]]] = [
    ("agents_report_conditions", case_agents_report),
    ("idle_gpus_never_quarantined", case_idle_gpus_never_quarantined),
    ("xid79_cordon_drain_repair_verify_uncordon", case_xid79_full_cycle),
    ("application_xid_event_no_cordon", case_application_xid_event_only),
    ("pending_row_remap_gpu_reset", case_pending_remap_gpu_reset),
    ("failed_row_remap_hardware_repair", case_failed_remap_hardware_repair),
    ("ib_port_half_rate_detected", case_ib_half_rate),
    ("busy_narrowed_pcie_link_quarantined", case_busy_narrowed_link_quarantined),
    ("breaker_caps_quarantines_when_most_nodes_fault", case_breaker_caps_quarantines),
    ("manual_cordon_never_uncordoned", case_manual_cordon_respected),
]


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    holder: dict[str, remediation_env.Env] = {}

    def bind(fn: Callable[[remediation_env.Env, base.CaseResult], None]) -> Callable[[base.SuiteContext, base.CaseResult], None]:
        def case(c: base.SuiteContext, res: base.CaseResult) -> None:
            if "env" not in holder:
                holder["env"] = remediation_env.Env(c)
            env = holder["env"]
            env.left_behind.clear()
            fn(env, res)
            if env.left_behind:
                # its checks held, but a fault it injected stays on a node until that node's repair
                raise base.CaseNotRun("a synthetic fault could not be cleared without the node's repair: "
                                      + "; ".join(env.left_behind.values()))
        return case

    return base.run_cases(NAME, ctx, [(name, bind(fn)) for name, fn in CASES])


# The cases, in run order, as conformance mappings name them.
CASE_NAMES = tuple(name for name, _fn in CASES)
