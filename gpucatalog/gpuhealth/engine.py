"""The remediation state machine: pure decisions, no Kubernetes I/O.

Per GPU node, visible on the node as the label ``gpu-health.gpu-catalog.io/state``::

    healthy -> quarantined -> draining -> repairing -> verifying -> healthy
                                  |            |  ^         |
                                  |            v  +-failed--+  (escalate: RESET_GPU -> REBOOT
                                  v       hardware-repair       -> HARDWARE_REPAIR)
                              escalated   (terminal: stays cordoned until a person resolves it)

Every fact the machine needs between steps is stored in the node's annotations, so a restarted
controller resumes where the previous one stopped. :func:`decide` maps one :class:`NodeView`
(plus the cluster-wide :class:`Budget`: breaker, parallel repairs) to a :class:`Plan` — a node
patch and a list of effects — which :mod:`gpucatalog.gpuhealth.controller` executes.
Called by the controller loop, the tests and ``bench/gpuhealth_decisions.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpucatalog.gpuhealth.breaker import Breaker
from gpucatalog.gpuhealth.xidpolicy import Action

PREFIX = "gpu-health.gpu-catalog.io/"
STATE_LABEL = PREFIX + "state"
OPT_OUT_LABEL = PREFIX + "enabled"  # "false" = never touch this node
OWNER = "gpu-health"
A_CORDONED_BY = PREFIX + "cordoned-by"
A_FAULT = PREFIX + "fault"
A_ACTION = PREFIX + "repair-action"
A_ATTEMPTS = PREFIX + "repair-attempts"
A_SINCE = PREFIX + "state-since"
A_REPAIR_STARTED = PREFIX + "repair-started"
A_REPAIR_RESULT = PREFIX + "repair-result"
A_VERIFY_STARTED = PREFIX + "verify-started"
A_LAST_REPAIR = PREFIX + "last-repair"
A_HISTORY = PREFIX + "fault-history"
A_TIMELINE = PREFIX + "timeline"
A_SKIPPED = PREFIX + "skipped"
A_MANUAL = PREFIX + "manual-override"
A_RESOLVED = PREFIX + "resolved"  # set by a person to release a hardware-repair/escalated node
A_ESCALATION = PREFIX + "escalation"

HEALTHY = "healthy"
QUARANTINED = "quarantined"
DRAINING = "draining"
REPAIRING = "repairing"
VERIFYING = "verifying"
HARDWARE_REPAIR = "hardware-repair"
ESCALATED = "escalated"
STATES = (HEALTHY, QUARANTINED, DRAINING, REPAIRING, VERIFYING, HARDWARE_REPAIR, ESCALATED)
ACTIVE_STATES = frozenset(STATES) - {HEALTHY}

# annotations of one remediation episode; removed when the node is back in service
EPISODE = (A_CORDONED_BY, A_FAULT, A_ACTION, A_ATTEMPTS, A_SINCE, A_REPAIR_STARTED, A_REPAIR_RESULT,
           A_VERIFY_STARTED, A_RESOLVED, A_ESCALATION)

LADDER = {Action.RESET_GPU: Action.REBOOT, Action.REBOOT: Action.HARDWARE_REPAIR}


@dataclass(frozen=True)
class Policy:
    """Controller settings. Durations are seconds."""

    dry_run: bool = False
    max_parallel_repairs: int = 2
    cooldown_s: float = 300.0  # minimum time between two repairs of the same node
    drain_timeout_s: float = 600.0
    force_delete_after_drain_timeout: bool = False
    repair_timeout_s: float = 1200.0
    verify_timeout_s: float = 600.0
    flap_threshold: int = 3  # this many faults in flap_window_s -> hardware repair
    flap_window_s: float = 86400.0
    slurm_reason_prefix: str = "gpu-health:"


@dataclass(frozen=True)
class NodeView:
    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    unschedulable: bool
    fault: Action | None  # strongest action among True fault conditions; None = no fault
    fault_summary: str = ""
    fault_unknown: bool = False  # a fault condition is Unknown (probe failed)
    pods_remaining: int | None = None  # filled by the I/O layer while draining
    slurm_busy: bool = False  # filled by the I/O layer (Slurm hook on): Slurm still runs jobs on the node
    verify: str | None = None  # "passed" | "failed" | "running" | None, while verifying
    detected_at: str = ""  # lastTransitionTime of the newest True fault condition

    @property
    def state(self) -> str:
        s = self.labels.get(STATE_LABEL, HEALTHY)
        return s if s in STATES else HEALTHY

    @property
    def owned(self) -> bool:
        return self.annotations.get(A_CORDONED_BY) == OWNER


@dataclass(frozen=True)
class Effect:
    kind: str  # evict | force-delete | repair | verify | cleanup-verify | slurm-drain | slurm-resume | event
    action: Action | None = None
    reason: str = ""
    message: str = ""
    event_type: str = "Normal"


@dataclass
class Plan:
    node: str
    state_from: str
    state_to: str
    labels: dict[str, str | None] = field(default_factory=dict)
    annotations: dict[str, str | None] = field(default_factory=dict)
    unschedulable: bool | None = None
    effects: list[Effect] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.labels or self.annotations or self.effects) and self.unschedulable is None

    def patch(self) -> dict[str, Any]:
        """A JSON merge patch of the node (``None`` deletes a key)."""
        body: dict[str, Any] = {}
        meta: dict[str, Any] = {}
        if self.labels:
            meta["labels"] = dict(self.labels)
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        if meta:
            body["metadata"] = meta
        if self.unschedulable is not None:
            body["spec"] = {"unschedulable": self.unschedulable}
        return body

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.effects.append(Effect("event", reason=reason, message=message,
                                   event_type="Warning" if warning else "Normal"))


@dataclass
class Budget:
    """Cluster-wide limits shared by all nodes of one reconcile pass."""

    breaker: Breaker
    total_gpu_nodes: int
    active_nodes: set[str] = field(default_factory=set)  # nodes in remediation now
    repairs_in_flight: int = 0


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


def _json(ann: Mapping[str, str], key: str, default: Any) -> Any:
    try:
        value = json.loads(ann.get(key) or "null")
    except ValueError:
        return default
    return default if value is None else value


def _goto(plan: Plan, view: NodeView, state: str, now: float) -> None:
    plan.state_to = state
    plan.labels[STATE_LABEL] = state
    plan.annotations[A_SINCE] = iso(now)
    timeline = _json(view.annotations, A_TIMELINE, {})
    if not isinstance(timeline, dict) or state == QUARANTINED:
        timeline = {}
    if state == QUARANTINED and view.detected_at:
        timeline["detected"] = view.detected_at
    timeline[state] = iso(now)
    plan.annotations[A_TIMELINE] = json.dumps(timeline, sort_keys=True)


def _since(view: NodeView, key: str, now: float) -> float:
    t = parse_ts(view.annotations.get(key))
    return now - t if t is not None else 0.0


def choose_action(view: NodeView, policy: Policy, now: float) -> Action:
    stored = _json(view.annotations, A_FAULT, {})
    base = view.fault
    if base is None or base is Action.NONE:
        try:
            base = Action[str(stored.get("action", "REBOOT"))] if isinstance(stored, dict) else Action.REBOOT
        except KeyError:
            base = Action.REBOOT
    history = [t for t in _json(view.annotations, A_HISTORY, []) if isinstance(t, int | float)]
    recent = [t for t in history if now - t <= policy.flap_window_s]
    if len(recent) >= policy.flap_threshold:
        return Action.HARDWARE_REPAIR
    return base


def _escalate(plan: Plan, view: NodeView, policy: Policy, now: float, why: str) -> None:
    try:
        current = Action[view.annotations.get(A_ACTION, "REBOOT")]
    except KeyError:
        current = Action.REBOOT
    nxt = LADDER.get(current, Action.HARDWARE_REPAIR)
    plan.event("RemediationEscalated", f"{why}; escalating {current.name} -> {nxt.name}", warning=True)
    plan.annotations[A_ACTION] = nxt.name
    plan.annotations[A_REPAIR_STARTED] = None
    plan.annotations[A_REPAIR_RESULT] = None
    plan.annotations[A_VERIFY_STARTED] = None
    plan.annotations[A_ESCALATION] = why
    _goto(plan, view, REPAIRING, now)


def _release(plan: Plan, view: NodeView, now: float) -> None:
    """Back in service: uncordon only what we cordoned, drop the episode's annotations."""
    _goto(plan, view, HEALTHY, now)
    for key in EPISODE:
        if key in view.annotations:
            plan.annotations[key] = None
    if view.owned and view.unschedulable:
        plan.unschedulable = False
    plan.effects.append(Effect("slurm-resume"))


def decide(view: NodeView, budget: Budget, policy: Policy, now: float) -> Plan:
    """One step of the state machine for one node."""
    state = view.state
    plan = Plan(view.name, state, state)
    opted_out = view.labels.get(OPT_OUT_LABEL, "").lower() == "false"
    faulty = view.fault is not None and view.fault is not Action.NONE

    if state == HEALTHY:
        skip = None
        if not faulty:
            for key in (A_SKIPPED, A_MANUAL):
                if key in view.annotations:
                    plan.annotations[key] = None
            return plan
        if opted_out:
            skip = "opted-out"
        elif view.annotations.get(A_MANUAL) == "true":
            skip = "manually-uncordoned-during-remediation"
        elif view.unschedulable:
            skip = "cordoned-by-someone-else"
        elif not budget.breaker.admit(view.name, now, budget.total_gpu_nodes, budget.active_nodes):
            skip = "circuit-breaker-open"
        if skip:
            if view.annotations.get(A_SKIPPED) != skip:
                plan.annotations[A_SKIPPED] = skip
                plan.event("RemediationSkipped", f"fault not remediated ({skip}): {view.fault_summary}", warning=True)
            return plan
        budget.active_nodes.add(view.name)
        history = [t for t in _json(view.annotations, A_HISTORY, []) if isinstance(t, int | float)]
        history = [t for t in history if now - t <= policy.flap_window_s] + [round(now, 3)]
        plan.unschedulable = True
        plan.annotations.update({
            A_CORDONED_BY: OWNER,
            A_FAULT: json.dumps({"action": view.fault.name if view.fault else "REBOOT",
                                 "summary": view.fault_summary[:512]}, sort_keys=True),
            A_HISTORY: json.dumps(history[-20:]),
            A_SKIPPED: None,
        })
        _goto(plan, view, QUARANTINED, now)
        plan.effects.append(Effect("slurm-drain", reason=f"{policy.slurm_reason_prefix} {view.fault_summary}"[:200]))
        plan.event("NodeQuarantined", f"cordoned for {view.fault.name if view.fault else '?'}: {view.fault_summary}",
                   warning=True)
        return plan

    # Every active state: a person who uncordoned the node takes it over.
    if not view.unschedulable:
        plan.annotations[A_MANUAL] = "true"
        _goto(plan, view, HEALTHY, now)
        for key in EPISODE:
            if key in view.annotations:
                plan.annotations[key] = None
        plan.effects.append(Effect("cleanup-verify"))
        plan.event("RemediationCancelled", "node was uncordoned by someone else; remediation cancelled",
                   warning=True)
        return plan

    if state == QUARANTINED:
        _goto(plan, view, DRAINING, now)
        if not view.slurm_busy:
            plan.effects.append(Effect("evict"))
        return plan

    # A node Slurm still runs jobs on keeps its pods (its slurmd among them) until Slurm's drain
    # has let those jobs end: a repair would kill them.
    if state == DRAINING:
        if view.pods_remaining == 0 and not view.slurm_busy:
            action = choose_action(view, policy, now)
            plan.annotations[A_ACTION] = action.name
            plan.annotations[A_ATTEMPTS] = "0"
            _goto(plan, view, REPAIRING, now)
            return plan
        if _since(view, A_SINCE, now) > policy.drain_timeout_s:
            # force-deleting pods never ends a Slurm job: those are left to a person
            if policy.force_delete_after_drain_timeout and not view.slurm_busy:
                plan.effects.append(Effect("force-delete"))
                plan.event("DrainForced", "drain timed out; deleting remaining pods (policy allows it)",
                           warning=True)
                return plan
            left = "Slurm jobs still running" if view.slurm_busy else f"{view.pods_remaining} pods left, PDB?"
            plan.annotations[A_ESCALATION] = f"drain did not finish in {policy.drain_timeout_s:g}s ({left})"
            _goto(plan, view, ESCALATED, now)
            plan.event("DrainTimedOut", plan.annotations[A_ESCALATION] or "", warning=True)
            return plan
        if not view.slurm_busy:
            plan.effects.append(Effect("evict"))
        return plan

    if state == REPAIRING:
        try:
            action = Action[view.annotations.get(A_ACTION, "")]
        except KeyError:
            action = choose_action(view, policy, now)
            plan.annotations[A_ACTION] = action.name
        started = view.annotations.get(A_REPAIR_STARTED)
        if not started:
            if action is Action.HARDWARE_REPAIR:
                plan.annotations[A_REPAIR_STARTED] = iso(now)
                plan.effects.append(Effect("repair", action=action, reason=view.fault_summary))
                _goto(plan, view, HARDWARE_REPAIR, now)
                plan.event("HardwareRepairRequested", f"hardware repair requested: {view.fault_summary}",
                           warning=True)
                return plan
            if budget.repairs_in_flight >= policy.max_parallel_repairs:
                return plan  # wait for a slot
            last = parse_ts(view.annotations.get(A_LAST_REPAIR))
            if last is not None and now - last < policy.cooldown_s:
                return plan  # cool-down between two repairs of this node
            budget.repairs_in_flight += 1
            attempts = int(view.annotations.get(A_ATTEMPTS, "0") or 0) + 1
            plan.annotations.update({A_REPAIR_STARTED: iso(now), A_LAST_REPAIR: iso(now),
                                     A_ATTEMPTS: str(attempts), A_REPAIR_RESULT: None})
            plan.effects.append(Effect("repair", action=action, reason=view.fault_summary))
            plan.event("RepairStarted", f"{action.name} (attempt {attempts})")
            return plan
        result = view.annotations.get(A_REPAIR_RESULT)
        if result == "succeeded":
            _goto(plan, view, VERIFYING, now)
            plan.annotations[A_VERIFY_STARTED] = iso(now)
            plan.effects.append(Effect("verify"))
            return plan
        if result == "failed" or _since(view, A_REPAIR_STARTED, now) > policy.repair_timeout_s:
            _escalate(plan, view, policy, now, f"{action.name} {'failed' if result else 'timed out'}")
        return plan

    if state == VERIFYING:
        if view.verify == "failed":
            plan.effects.append(Effect("cleanup-verify"))
            _escalate(plan, view, policy, now, "verification failed")
            return plan
        if view.verify == "passed" and not faulty and not view.fault_unknown:
            plan.effects.append(Effect("cleanup-verify"))
            _release(plan, view, now)
            plan.event("NodeReturnedToService", "verification passed; node uncordoned"
                       if view.owned else "verification passed; node stays cordoned (not cordoned by gpu-health)")
            return plan
        if view.verify is None:  # no verification workload yet (or it vanished): (re)create it
            if not view.annotations.get(A_VERIFY_STARTED):
                plan.annotations[A_VERIFY_STARTED] = iso(now)
            plan.effects.append(Effect("verify"))
        if _since(view, A_VERIFY_STARTED, now) > policy.verify_timeout_s:
            plan.effects.append(Effect("cleanup-verify"))
            _escalate(plan, view, policy, now, "verification timed out")
        return plan

    # HARDWARE_REPAIR / ESCALATED: terminal until a person marks the node resolved.
    if view.annotations.get(A_RESOLVED):
        plan.annotations[A_RESOLVED] = None
        plan.annotations[A_VERIFY_STARTED] = iso(now)
        plan.effects.append(Effect("verify"))
        _goto(plan, view, VERIFYING, now)
    return plan


def decide_all(
    views: Sequence[NodeView], breaker: Breaker, policy: Policy, now: float, total: int | None = None
) -> list[Plan]:
    """One reconcile pass over every GPU node, active nodes first so they hold their budget.

    ``total`` is the number of GPU nodes (defaults to ``len(views)``) that the breaker's share uses.
    """
    budget = Budget(breaker=breaker, total_gpu_nodes=len(views) if total is None else total,
                    active_nodes={v.name for v in views if v.state in ACTIVE_STATES})
    budget.repairs_in_flight = sum(
        1 for v in views if v.state == REPAIRING and v.annotations.get(A_REPAIR_STARTED)
    )
    ordered = sorted(views, key=lambda v: (v.state == HEALTHY, v.name))
    return [decide(v, budget, policy, now) for v in ordered]
