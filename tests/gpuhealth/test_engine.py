"""The remediation state machine and its safety rules, decided purely from node views.

``Sim`` applies each plan's merge patch to an in-memory node, standing in for the API server's
merge semantics only; the Kubernetes I/O itself is exercised by the integration tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from gpucatalog.gpuhealth import engine
from gpucatalog.gpuhealth.breaker import TRIPPED, Breaker
from gpucatalog.gpuhealth.engine import NodeView, Policy
from gpucatalog.gpuhealth.xidpolicy import Action

T0 = 1_800_000_000.0


@dataclass
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    fault: Action | None = None
    pods: int = 0
    verify: str | None = None
    slurm_busy: bool = False  # Slurm reports jobs on the node

    def view(self) -> NodeView:
        return NodeView(self.name, dict(self.labels), dict(self.annotations), self.unschedulable, self.fault,
                        fault_summary=f"fault {self.fault.name}" if self.fault else "",
                        pods_remaining=self.pods, verify=self.verify, slurm_busy=self.slurm_busy)

    def apply(self, plan: engine.Plan) -> None:
        for k, v in plan.labels.items():
            self.labels.pop(k, None) if v is None else self.labels.__setitem__(k, v)
        for k, v in plan.annotations.items():
            self.annotations.pop(k, None) if v is None else self.annotations.__setitem__(k, v)
        if plan.unschedulable is not None:
            self.unschedulable = plan.unschedulable

    @property
    def state(self) -> str:
        return self.labels.get(engine.STATE_LABEL, engine.HEALTHY)


def step(nodes: list[Node], breaker: Breaker, policy: Policy, now: float) -> dict[str, engine.Plan]:
    plans = engine.decide_all([n.view() for n in nodes], breaker, policy, now)
    by = {n.name: n for n in nodes}
    for p in plans:
        by[p.node].apply(p)
    return {p.node: p for p in plans}


def kinds(plan: engine.Plan) -> list[str]:
    return [e.kind for e in plan.effects if e.kind != "event"]


def events(plan: engine.Plan) -> list[str]:
    return [e.reason for e in plan.effects if e.kind == "event"]


def fleet(n: int = 10) -> list[Node]:
    return [Node(f"gpu-{i}") for i in range(n)]


def test_full_path_xid79_reboot_and_back_in_service() -> None:
    nodes, b, pol = fleet(), Breaker(max_share=0.5), Policy()
    n = nodes[0]
    n.fault, n.pods = Action.REBOOT, 2
    p = step(nodes, b, pol, T0)["gpu-0"]
    assert n.state == "quarantined" and n.unschedulable and n.annotations[engine.A_CORDONED_BY] == "gpu-health"
    assert kinds(p) == ["slurm-drain"] and "NodeQuarantined" in events(p)
    assert kinds(step(nodes, b, pol, T0 + 1)["gpu-0"]) == ["evict"] and n.state == "draining"
    assert kinds(step(nodes, b, pol, T0 + 2)["gpu-0"]) == ["evict"]  # pods still there: evict again
    n.pods = 0
    step(nodes, b, pol, T0 + 3)
    assert n.state == "repairing" and n.annotations[engine.A_ACTION] == "REBOOT"
    p = step(nodes, b, pol, T0 + 4)["gpu-0"]
    assert [(e.kind, e.action) for e in p.effects if e.kind == "repair"] == [("repair", Action.REBOOT)]
    assert n.annotations[engine.A_ATTEMPTS] == "1"
    assert step(nodes, b, pol, T0 + 5)["gpu-0"].empty  # repair running
    n.annotations[engine.A_REPAIR_RESULT] = "succeeded"  # written by the controller after the actuator
    n.fault = None
    assert kinds(step(nodes, b, pol, T0 + 6)["gpu-0"]) == ["verify"] and n.state == "verifying"
    n.verify = "running"
    assert step(nodes, b, pol, T0 + 7)["gpu-0"].empty
    n.verify = "passed"
    p = step(nodes, b, pol, T0 + 8)["gpu-0"]
    assert n.state == "healthy" and not n.unschedulable
    assert kinds(p) == ["cleanup-verify", "slurm-resume"] and "NodeReturnedToService" in events(p)
    assert engine.A_CORDONED_BY not in n.annotations and engine.A_FAULT not in n.annotations
    timeline = json.loads(n.annotations[engine.A_TIMELINE])
    assert list(timeline) == ["draining", "healthy", "quarantined", "repairing", "verifying"]


def test_application_fault_action_none_is_never_quarantined() -> None:
    nodes, b = fleet(), Breaker()
    nodes[0].fault = Action.NONE
    assert step(nodes, b, Policy(), T0)["gpu-0"].empty and not nodes[0].unschedulable


def test_manually_cordoned_node_is_never_touched() -> None:
    nodes, b, pol = fleet(), Breaker(), Policy()
    n = nodes[0]
    n.unschedulable, n.fault = True, Action.REBOOT
    p = step(nodes, b, pol, T0)["gpu-0"]
    assert n.state == "healthy" and n.unschedulable and n.annotations[engine.A_SKIPPED] == "cordoned-by-someone-else"
    assert p.unschedulable is None and kinds(p) == []
    assert step(nodes, b, pol, T0 + 1)["gpu-0"].empty  # reported once
    n.fault = None  # fault clears; still cordoned by its owner
    step(nodes, b, pol, T0 + 2)
    assert n.unschedulable and engine.A_SKIPPED not in n.annotations


def test_uncordon_only_what_we_cordoned_even_when_resolved_by_a_person() -> None:
    n = Node("gpu-0", unschedulable=True, labels={engine.STATE_LABEL: "hardware-repair"},
             annotations={engine.A_RESOLVED: "true", engine.A_ACTION: "HARDWARE_REPAIR"})
    b, pol = Breaker(), Policy()
    step([n], b, pol, T0)
    assert n.state == "verifying"
    n.verify = "passed"
    p = step([n], b, pol, T0 + 1)["gpu-0"]
    assert n.state == "healthy" and n.unschedulable and p.unschedulable is None


def test_opt_out_label() -> None:
    nodes = fleet()
    nodes[0].labels[engine.OPT_OUT_LABEL] = "false"
    nodes[0].fault = Action.REBOOT
    step(nodes, Breaker(), Policy(), T0)
    assert not nodes[0].unschedulable and nodes[0].annotations[engine.A_SKIPPED] == "opted-out"


def test_breaker_caps_quarantines_at_share_and_stays_tripped() -> None:
    nodes, b, pol = fleet(10), Breaker(max_share=0.3, window_s=600), Policy()
    for n in nodes[:6]:
        n.fault = Action.REBOOT
    plans = step(nodes, b, pol, T0)
    quarantined = [n.name for n in nodes if n.unschedulable]
    assert len(quarantined) == 3 and b.status == TRIPPED
    assert sum(1 for p in plans.values() if "RemediationSkipped" in events(p)) == 3
    assert {n.annotations.get(engine.A_SKIPPED) for n in nodes[3:6]} == {"circuit-breaker-open"}
    # in-flight remediations continue; a later fault on another node is still refused, even
    # after the window passed: the breaker needs a deliberate reset
    step(nodes, b, pol, T0 + 1)
    assert {n.state for n in nodes[:3]} == {"draining"}
    step(nodes, b, pol, T0 + 10_000)
    assert sum(1 for n in nodes if n.unschedulable) == 3
    # a reset while three nodes are still in remediation re-trips at once: they count
    b.reset()
    step(nodes, b, pol, T0 + 10_001)
    assert sum(1 for n in nodes if n.unschedulable) == 3 and b.status == TRIPPED
    # once they are back in service a reset lets the others through, again up to the limit
    for n in nodes[:3]:
        n.fault, n.labels, n.annotations, n.unschedulable = None, {}, {}, False
    b.reset()
    step(nodes, b, pol, T0 + 10_002)
    assert [n.name for n in nodes if n.unschedulable] == ["gpu-3", "gpu-4", "gpu-5"]


def test_max_parallel_repairs_and_cooldown() -> None:
    nodes, b = fleet(10), Breaker(max_share=1.0)
    pol = Policy(max_parallel_repairs=2, cooldown_s=300)
    for n in nodes[:4]:
        n.fault = Action.RESET_GPU
    for t in range(4):
        step(nodes, b, pol, T0 + t)
    started = [n.name for n in nodes if n.annotations.get(engine.A_REPAIR_STARTED)]
    assert len(started) == 2 and all(n.state == "repairing" for n in nodes[:4])
    # a node that was repaired moments ago waits for its cool-down
    n = nodes[5]
    n.labels[engine.STATE_LABEL] = "repairing"
    n.unschedulable = True
    n.annotations.update({engine.A_CORDONED_BY: "gpu-health", engine.A_ACTION: "REBOOT",
                          engine.A_LAST_REPAIR: engine.iso(T0 + 3)})
    solo = Policy(max_parallel_repairs=10, cooldown_s=300)
    assert step([n], Breaker(), solo, T0 + 100)["gpu-5"].empty
    assert kinds(step([n], Breaker(), solo, T0 + 400)["gpu-5"]) == ["repair"]


def drive_to_repairing(n: Node, b: Breaker, pol: Policy, t: float) -> float:
    n.pods = 0
    for _ in range(3):
        step([n], b, pol, t)
        t += 1
    assert n.state == "repairing", n.state
    return t


def test_failed_repair_escalates_reset_to_reboot_to_hardware() -> None:
    n, b, pol = Node("gpu-0", fault=Action.RESET_GPU), Breaker(), Policy(cooldown_s=0)
    t = drive_to_repairing(n, b, pol, T0)
    step([n], b, pol, t)
    n.annotations[engine.A_REPAIR_RESULT] = "failed"
    p = step([n], b, pol, t + 1)["gpu-0"]
    assert "RemediationEscalated" in events(p) and n.annotations[engine.A_ACTION] == "REBOOT"
    step([n], b, pol, t + 2)  # starts the reboot
    n.annotations[engine.A_REPAIR_RESULT] = "succeeded"
    step([n], b, pol, t + 3)
    n.verify = "failed"
    step([n], b, pol, t + 4)
    assert n.state == "repairing" and n.annotations[engine.A_ACTION] == "HARDWARE_REPAIR"
    n.verify = None
    p = step([n], b, pol, t + 5)["gpu-0"]
    assert n.state == "hardware-repair" and n.unschedulable and kinds(p) == ["repair"]
    assert step([n], b, pol, t + 99_999)["gpu-0"].empty  # terminal: stays cordoned


def test_repair_and_verify_timeouts_escalate() -> None:
    n, b = Node("gpu-0", fault=Action.RESET_GPU), Breaker()
    pol = Policy(repair_timeout_s=60, verify_timeout_s=30, cooldown_s=0)
    t = drive_to_repairing(n, b, pol, T0)
    step([n], b, pol, t)
    step([n], b, pol, t + 61)
    assert n.annotations[engine.A_ACTION] == "REBOOT"
    step([n], b, pol, t + 62)
    n.annotations[engine.A_REPAIR_RESULT] = "succeeded"
    step([n], b, pol, t + 63)
    n.verify = "passed"  # the workload passed but the agent still reports the fault
    assert step([n], b, pol, t + 70)["gpu-0"].empty
    step([n], b, pol, t + 100)
    assert n.annotations[engine.A_ACTION] == "HARDWARE_REPAIR"


def test_flapping_node_goes_to_hardware_repair_instead_of_another_reboot() -> None:
    pol = Policy(flap_threshold=3, flap_window_s=3600, cooldown_s=0)
    n = Node("gpu-0", annotations={engine.A_HISTORY: json.dumps([T0 - 100, T0 - 50])}, fault=Action.REBOOT)
    drive_to_repairing(n, Breaker(), pol, T0)
    assert n.annotations[engine.A_ACTION] == "HARDWARE_REPAIR"
    old = Node("gpu-1", annotations={engine.A_HISTORY: json.dumps([T0 - 9000, T0 - 8000])}, fault=Action.REBOOT)
    drive_to_repairing(old, Breaker(), pol, T0)
    assert old.annotations[engine.A_ACTION] == "REBOOT"


def test_drain_blocked_past_timeout_escalates_without_force_unless_policy() -> None:
    n, b = Node("gpu-0", fault=Action.REBOOT, pods=1), Breaker()
    pol = Policy(drain_timeout_s=60)
    step([n], b, pol, T0)
    step([n], b, pol, T0 + 1)
    p = step([n], b, pol, T0 + 100)["gpu-0"]
    assert n.state == "escalated" and n.unschedulable and "force-delete" not in kinds(p)
    m = Node("gpu-1", fault=Action.REBOOT, pods=1)
    forced = Policy(drain_timeout_s=60, force_delete_after_drain_timeout=True)
    b = Breaker()
    step([m], b, forced, T0)
    step([m], b, forced, T0 + 1)
    assert kinds(step([m], b, forced, T0 + 100)["gpu-1"]) == ["force-delete"] and m.state == "draining"


def test_manual_uncordon_cancels_and_is_not_requarantined_while_fault_persists() -> None:
    n, b, pol = Node("gpu-0", fault=Action.REBOOT, pods=3), Breaker(), Policy()
    step([n], b, pol, T0)
    step([n], b, pol, T0 + 1)
    n.unschedulable = False  # an operator uncordons during the drain
    p = step([n], b, pol, T0 + 2)["gpu-0"]
    assert n.state == "healthy" and "RemediationCancelled" in events(p)
    assert n.annotations[engine.A_MANUAL] == "true" and engine.A_CORDONED_BY not in n.annotations
    step([n], b, pol, T0 + 3)
    assert not n.unschedulable
    n.fault = None
    step([n], b, pol, T0 + 4)
    assert engine.A_MANUAL not in n.annotations


def test_restart_resumes_from_node_state() -> None:
    """A new controller has no memory: the same node annotations give the same next step."""
    n, b, pol = Node("gpu-0", fault=Action.RESET_GPU), Breaker(), Policy(cooldown_s=0)
    t = drive_to_repairing(n, b, pol, T0)
    view = n.view()
    fresh = engine.decide(replace(view), engine.Budget(Breaker(), 10), pol, t)
    again = engine.decide(replace(view), engine.Budget(Breaker(), 10), pol, t)
    assert kinds(fresh) == kinds(again) == ["repair"]


def test_unknown_state_label_is_treated_as_healthy() -> None:
    n = Node("gpu-0", labels={engine.STATE_LABEL: "weird"})
    assert n.view().state == "healthy"


def test_a_node_slurm_still_runs_jobs_on_keeps_its_pods_until_they_end() -> None:
    """Slurm's drain lets running jobs finish; evicting the node's pods (its slurmd) or repairing
    it before then would kill them."""
    n, b, pol = Node("gpu-0", fault=Action.RESET_GPU, pods=2, slurm_busy=True), Breaker(), Policy(drain_timeout_s=600)
    p = step([n], b, pol, T0)["gpu-0"]
    assert n.state == "quarantined" and "slurm-drain" in kinds(p)
    p = step([n], b, pol, T0 + 1)["gpu-0"]
    assert n.state == "draining" and kinds(p) == []  # no eviction while Slurm's jobs run
    assert kinds(step([n], b, pol, T0 + 2)["gpu-0"]) == [] and n.state == "draining"
    n.pods = 0
    step([n], b, pol, T0 + 3)
    assert n.state == "draining"  # no pods left, but Slurm's jobs still run: no repair
    n.slurm_busy, n.pods = False, 2
    assert kinds(step([n], b, pol, T0 + 4)["gpu-0"]) == ["evict"]
    n.pods = 0
    step([n], b, pol, T0 + 5)
    assert n.state == "repairing"


def test_slurm_jobs_past_the_drain_timeout_escalate_even_where_pods_may_be_force_deleted() -> None:
    n, b = Node("gpu-0", fault=Action.REBOOT, pods=1, slurm_busy=True), Breaker()
    forced = Policy(drain_timeout_s=60, force_delete_after_drain_timeout=True)
    step([n], b, forced, T0)
    step([n], b, forced, T0 + 1)
    p = step([n], b, forced, T0 + 100)["gpu-0"]
    assert n.state == "escalated" and n.unschedulable and "force-delete" not in kinds(p)
    assert n.annotations[engine.A_ESCALATION] == "drain did not finish in 60s (Slurm jobs still running)"
