"""The queueing contract: ``quota_reclaim`` and ``gang`` stated once, for every scheduling stack.

A case here says what it builds (a tree of departments and teams with guaranteed GPUs), what it
submits, which end state must hold and what it measures; a stack adapter (``kai.adapter``,
``kueue.adapter``) says how: how a team becomes queues, how a workload names its queue, how
all-or-nothing is asked for, which signal means "held back" and "scheduled". Both stacks report
the same case names with the same ``details`` fields, so reports and ``--json`` line them up.
A case an adapter cannot express is reported ``skipped`` with ``details.not_applicable`` and the
adapter's reason: shown as such, never counted as passed.

quota_reclaim cases (evidence fields in ``details``):

- ``reclaim_borrowed_gpus``: team A (quota g/2) fills g GPUs, borrowing idle B's quota; B submits
  g/2 within its quota; A's borrowed work is preempted and B's runs; A never drops below its own
  quota. ``reclaim_rounds`` rounds; ``latency`` (p50/p95 of B submit -> B scheduled), ``rounds``.
  When the picked nodes have an odd number of free GPUs, a non-preemptible holder takes one.
- ``non_preemptible_stays_within_quota``: a non-preemptible unit beyond its team's quota stays
  held back although the department has room (``held_back_reason``).
- ``over_quota_weights_split_spare_gpus``: two teams without quota, weights 1:2, split the GPUs of
  whole idle nodes (up to ``max_weight_gpus``) at least by their fair share (``nodes``,
  ``fair_share``, ``split``).
- ``hierarchical_reclaim_across_departments``: the reclaim case with A and B in two departments.

gang cases:

- ``gang_with_room_starts_together``: a gang of N one-GPU pods all start
  (``all_scheduled_after_s``: time to admit the gang, ``scheduled_spread_s``); where a stack lets
  a gang exist short of members (KAI), its first N-1 pods stay unbound although they fit, until
  the Nth exists (``partial_members_held``).
- ``gang_short_of_one_gpu_starts_none_then_all``: with room for N-1, no pod of the gang starts;
  when one GPU frees up, all N start (``held_back_reason``, ``started_after_s``).
- ``job_with_batch_min_member``: a batch/v1 Job of N pods is one all-or-nothing unit of N
  (``unit``: KAI's PodGroup or Kueue's Workload with its member count).

Called by ``quota_reclaim.run`` and ``gang.run``; talks only to the Kubernetes API.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client
from gpucatalog.validators.conformance.queueing import math as queueing_math

T = TypeVar("T")


@dataclass(frozen=True)
class Team:
    """A leaf: where workloads queue. ``quota`` guaranteed GPUs; ``preemptible`` False protects
    its work (KAI: the non-preemptible PriorityClass; Kueue: the team never borrows)."""

    name: str
    quota: int
    weight: float = 1.0
    preemptible: bool = True


@dataclass(frozen=True)
class Dept:
    """An inner node: guaranteed GPUs of its own subtree, children teams or departments."""

    name: str
    quota: int
    children: tuple[Dept | Team, ...] = field(default_factory=tuple)
    weight: float = 1.0

    def walk(self) -> Iterator[tuple[Dept | Team, Dept | None]]:
        """Every node below and including this one, with its parent (parents first)."""
        todo: list[tuple[Dept | Team, Dept | None]] = [(self, None)]
        while todo:
            node, parent = todo.pop(0)
            yield node, parent
            if isinstance(node, Dept):
                todo += [(c, node) for c in node.children]


class Space(Protocol):
    """One case's own corner of the cluster (a fresh namespace and queues), cleaned up after."""

    ns: str
    # Whether a gang can exist with fewer members than it needs (KAI: a PodGroup whose pods arrive
    # one by one). Kueue's gang is one Job: all members exist, or none.
    partial_gangs: bool

    def build(self, root: Dept) -> None: ...
    def submit(self, team: str, group: str, count: int, nodes: list[str], *, start: int = 0,
               preemptible: bool = True) -> None:
        """``count`` independent one-GPU units of ``group`` in ``team``, pinned to ``nodes`` (none:
        anywhere)."""
    def gang(self, team: str, group: str, size: int, node: str, members: int | None = None) -> None:
        """One all-or-nothing group of ``size`` one-GPU pods on ``node`` ("": anywhere), the stack's
        own way, with its first ``members`` pods only (default all; fewer only where ``partial_gangs``)."""
    def gang_member(self, team: str, group: str, size: int, node: str, i: int) -> None:
        """Member ``i`` of a gang made with fewer members (``partial_gangs`` stacks)."""
    def job(self, team: str, group: str, size: int, node: str) -> None:
        """A batch/v1 Job of ``size`` one-GPU pods that the stack must treat as one gang."""
    def scheduled(self, group: str) -> list[Any]:
        """Pods of ``group`` bound to a node and not terminating."""
    def held_back(self, group: str) -> list[str]:
        """The stack's reasons for the units of ``group`` it holds back (one per unit)."""
    def started(self, group: str) -> list[str]:
        """Any sign that part of ``group`` started (pods bound or being bound)."""
    def remove(self, group: str, *, only_pending: bool = False, one: bool = False) -> None: ...
    def units(self, group: str) -> int:
        """How many units of ``group`` exist (pods or Jobs, as the stack submits them)."""
    def gang_unit(self, group: str) -> dict[str, Any] | None:
        """What the stack made of a Job: ``{"kind", "name", "members"}`` once it exists."""
    def extras(self, case: str) -> dict[str, Any]:
        """Stack-specific evidence for ``case`` (e.g. KAI's PodGroup reasons)."""


class Adapter(Protocol):
    """One scheduling stack as the contract sees it."""

    stack: str
    kube: kube_client.Kube
    wait_seconds: float
    settle_seconds: float

    def preflight(self, res: base.CaseResult) -> None: ...
    def begin_case(self) -> None:
        """Before each case: wait until the stack serves again (after a crash in an earlier case)
        and count restarts from here, so one crash fails one case and the next starts clean."""
    def end_case(self) -> None:
        """After each case: a last, unthrottled watchdog check, so a crash after the case's last
        wait still fails that case and not the next."""
    def guard(self) -> None:
        """Raise ``CaseFailed`` when the stack's controller crashed or restarted during a case."""
    def not_applicable(self, case: str) -> str:
        """Why ``case`` cannot be expressed on this stack ('' when it can)."""
    def space(self, suite: str, res: base.CaseResult) -> AbstractContextManager[Space]: ...
    def close(self) -> None: ...


class Contract:
    """The cases, run through one adapter."""

    def __init__(self, ctx: base.SuiteContext, adapter: Adapter) -> None:
        self.a = adapter
        self.kube = adapter.kube
        self.rounds = int(ctx.params.get("reclaim_rounds", 3))
        self.max_gpus = int(ctx.params.get("max_reclaim_gpus", 16))
        self.max_weight_gpus = int(ctx.params.get("max_weight_gpus", 64))
        self.gang_size = int(ctx.params.get("gang_size", 4))

    def wait(self, what: str, probe: Callable[[], T | None]) -> T:
        return base.wait_for(what, probe, self.a.wait_seconds, interval=0.5, guard=self.a.guard)

    def stays(self, what: str, probe: Callable[[], bool]) -> None:
        base.holds(what, probe, self.a.settle_seconds, guard=self.a.guard)

    def case(self, name: str, fn: Callable[[base.CaseResult], None]) -> tuple[str, base.Case]:
        def run(_ctx: base.SuiteContext, res: base.CaseResult) -> None:
            res.details["stack"] = self.a.stack
            why = self.a.not_applicable(name)
            if why:
                res.result, res.reason = "skipped", f"not applicable on {self.a.stack}: {why}"
                res.details["not_applicable"] = True
                return
            self.a.begin_case()
            fn(res)
            self.a.end_case()

        return name, run

    def preflight(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        res.details["stack"] = self.a.stack
        self.a.preflight(res)

    # -- quota_reclaim ----------------------------------------------------------------------------

    def pick_nodes(self) -> tuple[list[str], int, int]:
        """Whole nodes with free GPUs (up to max_reclaim_gpus), G (the even number of their free
        GPUs the case uses) and how many free GPUs they have in all."""
        nodes, total = gpu_inventory.whole_nodes(gpu_inventory.free_gpus(self.kube), self.max_gpus)
        g = total - total % 2
        if g < 2:
            raise base.CaseFailed(f"needs at least 2 free GPUs, found {total}")
        return nodes, g, total

    def reclaim_borrowed_gpus(self, res: base.CaseResult) -> None:
        self.reclaim(res, lambda g: (Team("a", g // 2), Team("b", g // 2)))

    def hierarchical_reclaim_across_departments(self, res: base.CaseResult) -> None:
        self.reclaim(res, lambda g: (Dept("dept1", g // 2, (Team("a", g // 2),)),
                                     Dept("dept2", g // 2, (Team("b", g // 2),))))

    def reclaim(self, res: base.CaseResult, teams: Callable[[int], tuple[Dept | Team, ...]]) -> None:
        nodes, g, total = self.pick_nodes()
        half = g // 2
        res.details.update({"gpus": g, "nodes": nodes, "quota_a": half, "quota_b": half})
        samples: list[float] = []
        rounds: list[dict[str, Any]] = []
        odd = total % 2
        with self.a.space("reclaim", res) as sp:
            # The case's pods are pinned to all of these nodes: when their free GPUs add up to an
            # odd number, a non-preemptible holder of its own team takes the odd one first, or B
            # could start on it without any reclaim and A would settle one above its quota.
            holder = (Team("hold", 1, preemptible=False),) if odd else ()
            sp.build(Dept("root", g + odd, teams(g) + holder))
            self.hold_odd_gpu(sp, nodes, odd)
            a_next = 0
            for r in range(1, self.rounds + 1):
                # A (re)fills every GPU: half within its quota, half borrowed from idle B. Work of
                # A the stack still holds back from an earlier round is withdrawn first.
                sp.remove("a", only_pending=True)
                need = g - len(sp.scheduled("a"))
                sp.submit("a", "a", need, nodes, start=a_next)
                a_next += need
                self.wait(f"team A to borrow B's idle quota and run {g} pods (round {r})",
                          lambda: len(sp.scheduled("a")) >= g or None)
                info = self.one_reclaim(sp, f"b{r}", nodes, half, r)
                samples.extend(info["b_latency_s"])
                rounds.append(info)
                res.details["rounds"] = rounds
        res.details["latency"] = queueing_math.latency_summary(samples)

    def hold_odd_gpu(self, sp: Space, nodes: list[str], odd: int) -> None:
        """With an odd number of free GPUs on ``nodes``, one non-preemptible unit of team
        ``hold`` takes one, so exactly an even number is left for A and B."""
        if odd:
            sp.submit("hold", "holder", 1, nodes, preemptible=False)
            self.wait(f"a holder pod to take the odd free GPU of {', '.join(nodes)}",
                      lambda: len(sp.scheduled("holder")) >= 1 or None)

    def one_reclaim(self, sp: Space, group: str, nodes: list[str], half: int, r: int) -> dict[str, Any]:
        before = {x.metadata.name for x in sp.scheduled("a")}
        t0 = time.monotonic()
        seen: dict[str, float] = {}
        lowest = [len(before)]
        sp.submit("b", group, half, nodes)

        def b_running() -> bool | None:
            lowest[0] = min(lowest[0], len(sp.scheduled("a")))
            for x in sp.scheduled(group):
                seen.setdefault(x.metadata.name, time.monotonic() - t0)
            return len(seen) >= half or None

        self.wait(f"team B's {half} in-quota pods to run by reclaiming from A (round {r})", b_running)

        def a_settled() -> bool | None:
            running = len(sp.scheduled("a"))
            lowest[0] = min(lowest[0], running)
            return running <= half or None

        self.wait(f"team A to settle at its quota of {half} (round {r})", a_settled)
        after = {x.metadata.name for x in sp.scheduled("a")}
        lowest[0] = min(lowest[0], len(after))
        info = {"round": r, "evicted_from_a": len(before - after), "a_running": len(after),
                "lowest_a_running": lowest[0], "b_latency_s": sorted(round(v, 3) for v in seen.values())}
        if lowest[0] < half:
            raise base.CaseFailed(f"round {r}: team A fell to {lowest[0]} running pods, below its quota of {half}")
        if len(after) != half:
            raise base.CaseFailed(f"round {r}: team A kept {len(after)} pods; expected exactly its quota {half}")
        sp.remove(group)  # B leaves again so A can borrow in the next round
        self.wait(f"team B's work of round {r} to be gone", lambda: not sp.units(group) or None)
        return info

    def non_preemptible_stays_within_quota(self, res: base.CaseResult) -> None:
        node, _ = gpu_inventory.roomiest_node(gpu_inventory.free_gpus(self.kube), 2)
        with self.a.space("reclaim", res) as sp:
            # the department has room for two; the team is guaranteed one
            sp.build(Dept("root", 2, (Team("q", 1, preemptible=False),)))
            sp.submit("q", "np", 2, [node], preemptible=False)

            def decided() -> str | None:
                running = sp.scheduled("np")
                if len(running) > 1:
                    raise base.CaseFailed(f"{len(running)} non-preemptible 1-GPU units run in a team with quota 1; "
                                          "expected exactly 1")
                held = sp.held_back("np")
                return held[0] if len(running) == 1 and held else None

            res.details["held_back_reason"] = self.wait("the stack to run one non-preemptible unit and hold the "
                                                        "other back", decided)
            res.details.update(sp.extras("non_preemptible_stays_within_quota"))
            self.stays("the over-quota non-preemptible unit held back", lambda: len(sp.scheduled("np")) == 1)

    def over_quota_weights_split_spare_gpus(self, res: base.CaseResult) -> None:
        # Whole idle nodes, up to max_weight_gpus GPUs: the teams' pods are pinned to them, so
        # work elsewhere cannot skew the split (and a large cluster need not be filled).
        capacity = gpu_inventory.gpu_capacity(self.kube)
        idle = {n: c for n, c in gpu_inventory.free_gpus(self.kube).items() if c and c == capacity.get(n)}
        nodes, g = gpu_inventory.whole_nodes(idle, self.max_weight_gpus)
        if g > self.max_weight_gpus or g < 3:
            raise base.CaseFailed(f"the idle nodes picked have {g} GPUs; this case runs on 3..{self.max_weight_gpus} "
                                  f"GPUs of whole idle nodes ({len(idle)} of {len(capacity)} nodes idle; "
                                  "set max_weight_gpus)")
        res.details["nodes"] = sorted(nodes)
        weights = {"w1": 1.0, "w2": 2.0}
        with self.a.space("reclaim", res) as sp:
            sp.build(Dept("root", g, tuple(Team(k, 0, weight=w) for k, w in weights.items())))
            nodes = sorted(nodes)
            for i in range(g):  # interleaved, so neither team gets a head start
                for k in weights:
                    sp.submit(k, k, 1, nodes, start=i)
            share = queueing_math.fair_share(g, {k: queueing_math.QueueShare(0, w, g) for k, w in weights.items()})
            want = queueing_math.whole_units(share)
            res.details["fair_share"] = {k: round(v, 3) for k, v in share.items()}

            def converged() -> dict[str, int] | None:
                got = {k: len(sp.scheduled(k)) for k in weights}
                res.details["split"] = got
                ok = sum(got.values()) >= sum(want.values()) and all(got[k] >= want[k] for k in weights)
                return got if ok else None

            got = self.wait(f"GPUs to split 1:2 (at least {want})", converged)
            if sum(got.values()) > g:
                raise base.CaseFailed(f"{sum(got.values())} pods scheduled on {g} GPUs")

    # -- gang ---------------------------------------------------------------------------------

    def roomiest(self, need: int) -> tuple[str, int]:
        # Ties go to the last node by name (gpu_inventory.roomiest_node takes the first).
        node, free = max(gpu_inventory.free_gpus(self.kube).items(), key=lambda kv: (kv[1], kv[0]))
        if free < need:
            raise base.CaseFailed(f"needs a node with {need} free GPUs; best is {node} with {free}")
        return node, free

    def all_scheduled(self, sp: Space, group: str, n: int, what: str) -> list[Any]:
        return self.wait(what, lambda: (lambda pods: pods if len(pods) >= n else None)(sp.scheduled(group)))

    @staticmethod
    def spread(pods: list[Any], res: base.CaseResult) -> None:
        times = [t for t in (_scheduled_at(x) for x in pods) if t is not None]
        if times:
            res.details["scheduled_spread_s"] = round(max(times) - min(times), 3)

    def none_started(self, sp: Space, why: str) -> bool:
        """True while no pod of the gang started; CaseFailed naming what did otherwise."""
        signs = sp.started("gang")
        if signs:
            raise base.CaseFailed(f"gang started without all its members ({why}): {', '.join(signs)}")
        return True

    def gang_with_room_starts_together(self, res: base.CaseResult) -> None:
        node, free = self.roomiest(2)
        n = min(self.gang_size, free)
        res.details.update({"node": node, "min_member": n})
        with self.a.space("gang", res) as sp:
            sp.build(Dept("root", n, (Team("q", n),)))
            if sp.partial_gangs:
                # The node has room for every member, so only gang scheduling holds these back: a
                # scheduler that places pods one by one would bind them at once.
                sp.gang("q", "gang", n, node, members=n - 1)
                self.stays(f"none of the first {n - 1} gang pods bound before the last member exists",
                           lambda: self.none_started(sp, f"{n - 1} of minMember {n} submitted, with room for all"))
                res.details["partial_members_held"] = n - 1
            t0 = time.monotonic()
            if sp.partial_gangs:
                sp.gang_member("q", "gang", n, node, n - 1)
            else:
                sp.gang("q", "gang", n, node)
            pods = self.all_scheduled(sp, "gang", n, f"all {n} pods of the gang to be scheduled once complete")
            res.details["all_scheduled_after_s"] = round(time.monotonic() - t0, 3)
            self.spread(pods, res)

    def gang_short_of_one_gpu_starts_none_then_all(self, res: base.CaseResult) -> None:
        node, free = self.roomiest(2)
        n = min(self.gang_size, free)
        fillers = free - (n - 1)
        res.details.update({"node": node, "min_member": n, "free_gpus": free, "fillers": fillers})
        with self.a.space("gang", res) as sp:
            # Non-preemptible, in-quota fillers of another team: the gang may neither preempt nor reclaim them.
            sp.build(Dept("root", free, (Team("hold", fillers, preemptible=False), Team("q", 0))))
            sp.submit("hold", "filler", fillers, [node], preemptible=False)
            self.all_scheduled(sp, "filler", fillers, f"{fillers} filler pods to hold all but {n - 1} GPUs of {node}")
            sp.gang("q", "gang", n, node)
            def all_held() -> str | None:
                held = sp.held_back("gang")
                return held[0] if held and len(held) == sp.units("gang") else None

            res.details["held_back_reason"] = self.wait(f"the stack to hold back all {n} gang pods", all_held)

            self.stays("no gang pod started", lambda: self.none_started(sp, f"room for {n - 1}"))
            t0 = time.monotonic()
            sp.remove("filler", one=True)
            pods = self.all_scheduled(sp, "gang", n, f"all {n} gang pods to start once one GPU freed up")
            res.details["started_after_s"] = round(time.monotonic() - t0, 3)
            self.spread(pods, res)

    def job_with_batch_min_member(self, res: base.CaseResult) -> None:
        node, free = self.roomiest(2)
        n = min(self.gang_size, free)
        res.details.update({"node": node, "min_member": n})
        with self.a.space("gang", res) as sp:
            sp.build(Dept("root", n, (Team("q", n),)))
            sp.job("q", "job", n, node)
            self.all_scheduled(sp, "job", n, f"all {n} pods of the Job to be scheduled")
            unit = self.wait("the stack's all-or-nothing unit of the Job", lambda: sp.gang_unit("job"))
            res.details["unit"] = unit
            if unit.get("members") != n:
                raise base.CaseFailed(f"the Job's {unit.get('kind')} has {unit.get('members')} members; expected {n}")


def _scheduled_at(pod_obj: Any) -> float | None:
    for cond in (pod_obj.status.conditions or []) if pod_obj.status else []:
        if cond.type == "PodScheduled" and cond.status == "True" and cond.last_transition_time is not None:
            return float(cond.last_transition_time.timestamp())
    return None


QUOTA_RECLAIM_CASES = ("reclaim_borrowed_gpus", "non_preemptible_stays_within_quota",
                       "over_quota_weights_split_spare_gpus", "hierarchical_reclaim_across_departments")
GANG_CASES = ("gang_with_room_starts_together", "gang_short_of_one_gpu_starts_none_then_all",
              "job_with_batch_min_member")


def run(suite: str, ctx: base.SuiteContext, adapter: Adapter, names: tuple[str, ...]) -> base.SuiteResult:
    """The named cases of ``suite`` behind the adapter's preflight; the adapter is closed after."""
    c = Contract(ctx, adapter)
    try:
        return base.run_with_preflight(suite, ctx, c.preflight, [c.case(n, getattr(c, n)) for n in names])
    finally:
        adapter.close()
