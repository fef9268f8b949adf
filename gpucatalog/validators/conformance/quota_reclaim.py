"""Conformance suite ``quota_reclaim``: guaranteed quotas, borrowing idle quota, and reclaim.

Cases:
- ``reclaim_borrowed_gpus``: queue A fills the GPUs with preemptible pods, borrowing B's idle
  quota; B submits within its quota; A's over-quota pods are evicted and B's run; A never
  drops below its own quota. Repeated ``reclaim_rounds`` times; every B pod's latency
  (B submits -> B scheduled) is a sample, summarised as p50/p95 in ``details["latency"]``.
- ``non_preemptible_stays_within_quota``: a non-preemptible pod beyond its queue's quota stays
  pending although GPUs are free.
- ``over_quota_weights_split_spare_gpus``: two queues without quota and weights 1:2 split the
  GPUs about 1:2 (each at least its whole fair share).
- ``hierarchical_reclaim_across_departments``: the reclaim case with each team under its own
  department queue.

Called through ``SUITES`` by the certify pipeline; talks only to the Kubernetes API.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from gpucatalog.validators.conformance import (
    base,
    gpu_inventory,
    kai_math,
    kai_pods,
    kai_suite,
    kai_workspace,
)

NAME = "quota_reclaim"
COMPONENTS = ["scheduler", "binder", "pod-grouper"]


class _ReclaimTracker:
    """What one reclaim round observed: when each B pod was first seen scheduled (seconds after
    B submitted), and the fewest A pods seen running meanwhile."""

    def __init__(self, a_running: int) -> None:
        self.t0 = time.monotonic()
        self.seen: dict[str, float] = {}
        self.lowest_a = a_running

    def observe_a(self, running: int) -> None:
        self.lowest_a = min(self.lowest_a, running)

    def observe_b(self, names: Iterable[str]) -> None:
        now = time.monotonic() - self.t0
        for name in names:
            self.seen.setdefault(name, now)


class _Suite(kai_suite.KaiSuite):
    components = COMPONENTS

    def __init__(self, ctx: base.SuiteContext) -> None:
        super().__init__(ctx)
        self.rounds = int(ctx.params.get("reclaim_rounds", 3))
        self.max_gpus = int(ctx.params.get("max_reclaim_gpus", 16))
        self.max_weight_gpus = int(ctx.params.get("max_weight_gpus", 64))

    def scheduled(self, ws: kai_workspace.Workspace, group: str) -> list[Any]:
        return [x for x in ws.group_pods(group)
                if kai_pods.is_scheduled(x) and x.metadata.deletion_timestamp is None]

    def pick_nodes(self) -> tuple[list[str], int]:
        """Whole nodes with free GPUs, up to max_reclaim_gpus, an even number of GPUs in all."""
        nodes, total = gpu_inventory.whole_nodes(gpu_inventory.free_gpus(self.kube), self.max_gpus)
        total -= total % 2
        if total < 2:
            raise base.CaseFailed(f"needs at least 2 free GPUs, found {total}")
        return nodes, total

    def submit(self, ws: kai_workspace.Workspace, queue: str, group: str, count: int, nodes: list[str], start: int = 0,
               priority_class: str | None = None) -> None:
        for i in range(start, start + count):
            body = kai_pods.pod(self.p, f"{group}-{i}", queue, group=group, gpus=1,
                                priority_class=priority_class or self.p.preemptible_class)
            ws.create(kai_pods.pin(body, nodes))

    def wait_count(self, ws: kai_workspace.Workspace, group: str, count: int, what: str) -> None:
        self.wait(what, lambda: len(self.scheduled(ws, group)) >= count or None)

    # -- cases (the preflight is KaiSuite's) ---------------------------------------------------

    def reclaim_rounds(self, ws: kai_workspace.Workspace, a: str, b: str, res: base.CaseResult) -> None:
        nodes, g = self.pick_nodes()
        half = g // 2
        res.details.update({"gpus": g, "nodes": nodes, "quota_a": half, "quota_b": half})
        samples: list[float] = []
        rounds: list[dict[str, Any]] = []
        a_next = 0
        for r in range(1, self.rounds + 1):
            # A (re)fills every GPU: half within its quota, half borrowed from idle B.
            need = g - len(self.scheduled(ws, "a"))
            self.submit(ws, a, "a", need, nodes, start=a_next)
            a_next += need
            self.wait_count(ws, "a", g, f"queue A to borrow and run {g} pods (round {r})")
            info = self.one_reclaim(ws, b, f"b{r}", nodes, half, r)
            samples.extend(info["b_latency_s"])
            rounds.append(info)
            res.details["rounds"] = rounds
        res.details["latency"] = kai_math.latency_summary(samples)

    def one_reclaim(self, ws: kai_workspace.Workspace, b: str, group: str, nodes: list[str], half: int, r: int) -> dict[str, Any]:
        """B submits ``half`` in-quota pods while A holds every GPU; measure and check the reclaim."""
        before = {x.metadata.name for x in self.scheduled(ws, "a")}
        track = _ReclaimTracker(len(before))
        self.submit(ws, b, group, half, nodes)

        def b_running() -> bool | None:
            track.observe_a(len(self.scheduled(ws, "a")))
            track.observe_b(x.metadata.name for x in self.scheduled(ws, group))
            return len(track.seen) >= half or None

        self.wait(f"queue B's {half} in-quota pods to run by reclaiming from A (round {r})", b_running)

        def a_settled() -> bool | None:
            running = len(self.scheduled(ws, "a"))
            track.observe_a(running)
            return running <= half or None

        self.wait(f"queue A to settle at its quota of {half} (round {r})", a_settled)
        after = {x.metadata.name for x in self.scheduled(ws, "a")}
        track.observe_a(len(after))
        info = {"round": r, "evicted_from_a": len(before - after), "a_running": len(after),
                "lowest_a_running": track.lowest_a, "b_latency_s": sorted(round(v, 3) for v in track.seen.values())}
        if track.lowest_a < half:
            raise base.CaseFailed(f"round {r}: queue A fell to {track.lowest_a} running pods, below its quota of {half}")
        if len(after) != half:
            raise base.CaseFailed(f"round {r}: queue A kept {len(after)} pods; expected exactly its quota {half}")
        # B leaves again so A can borrow in the next round.
        for x in ws.group_pods(group):
            ws.delete_pod(x.metadata.name)
        self.wait(f"queue B's pods of round {r} to be gone", lambda: not ws.group_pods(group) or None)
        return info

    def reclaim_borrowed_gpus(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        with kai_workspace.workspace(self.kube, self.p, "reclaim", res) as ws:
            _, g = self.pick_nodes()
            root = ws.queue(f"{ws.ns}-root", quota=g)
            a = ws.queue(f"{ws.ns}-a", parent=root, quota=g // 2)
            b = ws.queue(f"{ws.ns}-b", parent=root, quota=g // 2)
            self.reclaim_rounds(ws, a, b, res)

    def hierarchical_reclaim_across_departments(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        with kai_workspace.workspace(self.kube, self.p, "reclaim", res) as ws:
            _, g = self.pick_nodes()
            root = ws.queue(f"{ws.ns}-root", quota=g)
            d1 = ws.queue(f"{ws.ns}-dept1", parent=root, quota=g // 2)
            d2 = ws.queue(f"{ws.ns}-dept2", parent=root, quota=g // 2)
            a = ws.queue(f"{ws.ns}-team-a", parent=d1, quota=g // 2)
            b = ws.queue(f"{ws.ns}-team-b", parent=d2, quota=g // 2)
            self.reclaim_rounds(ws, a, b, res)

    def non_preemptible_stays_within_quota(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        node, _n = gpu_inventory.roomiest_node(gpu_inventory.free_gpus(self.kube), 2)
        with kai_workspace.workspace(self.kube, self.p, "reclaim", res) as ws:
            q = ws.leaf_queue(quota=1)
            self.submit(ws, q, "np", 2, [node], priority_class=self.p.non_preemptible_class)
            done, pending = self.settle(ws, "np", 2, "KAI to decide on both non-preemptible pods")
            if len(done) != 1:
                raise base.CaseFailed(f"{len(done)} non-preemptible 1-GPU pods scheduled in a queue with quota 1; "
                                      "expected exactly 1")
            res.details["pending_reason"] = kai_pods.unschedulable_reason(pending[0])
            res.details["podgroup_reasons"] = self.podgroup_reasons(ws)
            self.stays("the over-quota non-preemptible pod pending", lambda: len(self.scheduled(ws, "np")) == 1)

    def podgroup_reasons(self, ws: kai_workspace.Workspace) -> list[str]:
        reasons: list[str] = []
        for pg in ws.pod_groups():
            for cond in (pg.get("status") or {}).get("schedulingConditions") or []:
                reasons.append(str(cond.get("reason", "")))
        return sorted(set(reasons))

    def over_quota_weights_split_spare_gpus(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        capacity = gpu_inventory.gpu_capacity(self.kube)
        free = gpu_inventory.free_gpus(self.kube)
        g = sum(free.values())
        if g != sum(capacity.values()):
            raise base.CaseFailed(f"needs an idle cluster: {sum(capacity.values()) - g} GPUs are in use")
        if g > self.max_weight_gpus or g < 3:
            raise base.CaseFailed(f"the cluster has {g} GPUs; this case runs on 3..{self.max_weight_gpus} "
                                  "(set max_weight_gpus)")
        weights = {"w1": 1.0, "w2": 2.0}
        with kai_workspace.workspace(self.kube, self.p, "reclaim", res) as ws:
            root = ws.queue(f"{ws.ns}-root", quota=0)
            queues = {k: ws.queue(f"{ws.ns}-{k}", parent=root, quota=0, weight=int(w)) for k, w in weights.items()}
            nodes = sorted(capacity)
            for i in range(g):  # interleaved, so neither queue gets a head start
                for k, q in queues.items():
                    self.submit(ws, q, k, 1, nodes, start=i)
            share = kai_math.fair_share(g, {k: kai_math.QueueShare(0, w, g) for k, w in weights.items()})
            want = kai_math.whole_units(share)
            res.details["fair_share"] = {k: round(v, 3) for k, v in share.items()}

            def converged() -> dict[str, int] | None:
                got = {k: len(self.scheduled(ws, k)) for k in weights}
                res.details["split"] = got
                ok = sum(got.values()) >= sum(want.values()) and all(got[k] >= want[k] for k in weights)
                return got if ok else None

            got = self.wait(f"GPUs to split 1:2 (at least {want})", converged)
            if sum(got.values()) > g:
                raise base.CaseFailed(f"{sum(got.values())} pods scheduled on {g} GPUs")


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    s = _Suite(ctx)
    return s.run(NAME, ctx, [
        ("reclaim_borrowed_gpus", s.reclaim_borrowed_gpus),
        ("non_preemptible_stays_within_quota", s.non_preemptible_stays_within_quota),
        ("over_quota_weights_split_spare_gpus", s.over_quota_weights_split_spare_gpus),
        ("hierarchical_reclaim_across_departments", s.hierarchical_reclaim_across_departments),
    ])
