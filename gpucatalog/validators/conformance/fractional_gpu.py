"""Conformance suite ``fractional_gpu``: KAI shares GPUs between pods that ask for part of one
(``gpu-fraction`` or ``gpu-memory``) and never overcommits a device.

Cases: two half-GPU pods share one GPU; 2N pods at 0.7 on N free GPUs schedule exactly N; a
``gpu-memory`` request that fits schedules and one larger than the GPU stays pending with a
reason; whole-GPU and fractional pods together never oversubscribe a device. Each case records
its placements (pod, node, GPU, fraction) in ``details["placements"]``.

Called through ``SUITES`` by the certify pipeline; talks only to the Kubernetes API.
"""

from __future__ import annotations

from typing import Any

from gpucatalog.validators.conformance import base, kai_cluster, kai_math
from gpucatalog.validators.conformance.kai_cluster import Kube, Params, Watchdog

NAME = "fractional_gpu"
COMPONENTS = ["scheduler", "binder", "pod-grouper", "admission"]


class _Suite:
    def __init__(self, ctx: base.SuiteContext) -> None:
        self.p = Params.from_ctx(ctx)
        self.kube = Kube(str(ctx.kubeconfig))
        self.dog: Watchdog | None = None

    # -- helpers -------------------------------------------------------------------------------

    def watchdog(self) -> Watchdog:
        if self.dog is None:
            self.dog = Watchdog(self.kube, self.p, COMPONENTS)
        return self.dog

    def leaf(self, ws: kai_cluster.Workspace) -> str:
        parent = ws.queue(f"{ws.ns}-root", quota=0)
        return ws.queue(f"{ws.ns}-q", parent=parent, quota=0)

    def placements(self, ws: kai_cluster.Workspace, group: str) -> list[kai_math.Placement]:
        memory = kai_cluster.gpu_memory_mib(self.kube)
        return [kai_cluster.placement(self.kube, self.p, pod, memory)
                for pod in ws.pods(f"{kai_cluster.SUITE_LABEL}={group}") if kai_cluster.is_scheduled(pod)]

    def settle(self, ws: kai_cluster.Workspace, group: str, total: int) -> tuple[list[Any], list[Any]]:
        """Wait until KAI decided on every pod of ``group``: scheduled or pending with a reason."""

        def decided() -> tuple[list[Any], list[Any]] | None:
            pods = ws.pods(f"{kai_cluster.SUITE_LABEL}={group}")
            done = [q for q in pods if kai_cluster.is_scheduled(q)]
            pending = [q for q in pods if kai_cluster.unschedulable_reason(q)]
            return (done, pending) if len(done) + len(pending) == total else None

        return kai_cluster.wait(self.watchdog(), f"KAI to schedule or reject all {total} pods of {group}",
                                decided, self.p.wait_seconds)

    def record(self, res: base.CaseResult, placements: list[kai_math.Placement]) -> None:
        res.details["placements"] = [pl.to_dict() for pl in placements]

    def no_oversubscription(self, placements: list[kai_math.Placement]) -> None:
        problems = kai_math.oversubscription(placements, kai_cluster.gpu_capacity(self.kube))
        if problems:
            raise base.CaseFailed("GPU oversubscribed: " + "; ".join(problems))

    # -- cases ---------------------------------------------------------------------------------

    def preflight(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        res.details.update(kai_cluster.preflight(self.kube, self.p, COMPONENTS, min_gpus=2))
        res.details["free_gpus"] = sum(kai_cluster.free_gpus(self.kube).values())
        self.watchdog()

    def two_halves_share_one_gpu(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        with kai_cluster.workspace(self.kube, self.p, "frac", res) as ws:
            q = self.leaf(ws)
            for i in range(2):
                ws.create(kai_cluster.pod(self.p, f"half-{i}", q, group="halves", fraction=0.5))
            done, pending = self.settle(ws, "halves", 2)
            if pending:
                raise base.CaseFailed(f"{len(pending)} half-GPU pod(s) not scheduled: "
                                      f"{kai_cluster.unschedulable_reason(pending[0])}")
            placements = self.placements(ws, "halves")
            self.record(res, placements)
            where = {(pl.node, pl.gpu) for pl in placements}
            if len(where) != 1 or not placements[0].gpu:
                raise base.CaseFailed(f"the two 0.5 pods did not share one GPU: {sorted(where)}")

    def fill_gpus_at_seventy_percent(self, ctx: base.SuiteContext, res: base.CaseResult) -> None:
        # Use whole nodes up to max_fill_gpus free GPUs, and pin the pods there, so "exactly N"
        # is exact even when the cluster has more free GPUs than the case fills.
        cap = int(ctx.params.get("max_fill_gpus", 32))
        nodes: list[str] = []
        n = 0
        for node, count in sorted(kai_cluster.free_gpus(self.kube).items(), key=lambda kv: (-kv[1], kv[0])):
            if count and (not nodes or n + count <= cap):
                nodes.append(node)
                n += count
        if n < 1:
            raise base.CaseFailed("no free GPU to fill")
        res.details.update({"gpus": n, "nodes": nodes})
        with kai_cluster.workspace(self.kube, self.p, "frac", res) as ws:
            q = self.leaf(ws)
            for i in range(2 * n):
                ws.create(kai_cluster.pin(kai_cluster.pod(self.p, f"seventy-{i}", q, group="seventy", fraction=0.7),
                                          nodes))
            done, pending = self.settle(ws, "seventy", 2 * n)
            placements = self.placements(ws, "seventy")
            self.record(res, placements)
            self.no_oversubscription(placements)
            if len(done) != n:
                raise base.CaseFailed(f"{len(done)} of {2 * n} pods at 0.7 scheduled on {n} free GPUs; expected exactly {n}")
            groups = {(pl.node, pl.gpu) for pl in placements}
            if len(groups) != len(placements):
                raise base.CaseFailed(f"{len(placements)} pods at 0.7 share only {len(groups)} GPUs")
            kai_cluster.stays(self.watchdog(), f"{n} pods at 0.7 scheduled and no more",
                              lambda: sum(kai_cluster.is_scheduled(x) for x in ws.pods(
                                  f"{kai_cluster.SUITE_LABEL}=seventy")) == n, self.p.settle_seconds)

    def _memory(self) -> dict[str, int]:
        memory = kai_cluster.gpu_memory_mib(self.kube)
        if not memory:
            raise base.CaseFailed(f"no node carries the {kai_cluster.GPU_MEMORY_LABEL} label KAI needs for gpu-memory")
        return memory

    def gpu_memory_that_fits(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        ask = min(self._memory().values()) // 4
        res.details["gpu_memory_mib"] = ask
        with kai_cluster.workspace(self.kube, self.p, "frac", res) as ws:
            q = self.leaf(ws)
            ws.create(kai_cluster.pod(self.p, "mem-fits", q, group="mem", gpu_memory=ask))
            done, pending = self.settle(ws, "mem", 1)
            if pending:
                raise base.CaseFailed(f"a {ask} MiB gpu-memory pod did not schedule: "
                                      f"{kai_cluster.unschedulable_reason(pending[0])}")
            self.record(res, self.placements(ws, "mem"))

    def gpu_memory_larger_than_any_gpu(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        ask = max(self._memory().values()) * 2
        res.details["gpu_memory_mib"] = ask
        with kai_cluster.workspace(self.kube, self.p, "frac", res) as ws:
            q = self.leaf(ws)
            ws.create(kai_cluster.pod(self.p, "mem-too-big", q, group="big", gpu_memory=ask))
            done, pending = self.settle(ws, "big", 1)
            if done:
                raise base.CaseFailed(f"a {ask} MiB gpu-memory pod was scheduled on {done[0].spec.node_name}")
            res.details["reason"] = kai_cluster.unschedulable_reason(pending[0])
            kai_cluster.stays(self.watchdog(), "the oversized gpu-memory pod pending",
                              lambda: not any(kai_cluster.is_scheduled(x) for x in ws.pods(
                                  f"{kai_cluster.SUITE_LABEL}=big")), self.p.settle_seconds)

    def whole_and_fractional_never_oversubscribe(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        free = kai_cluster.free_gpus(self.kube)
        node, n = max(free.items(), key=lambda kv: kv[1])
        if n < 2:
            raise base.CaseFailed(f"needs a node with 2 free GPUs; best is {node} with {n}")
        res.details.update({"node": node, "free_gpus": n})
        with kai_cluster.workspace(self.kube, self.p, "frac", res) as ws:
            q = self.leaf(ws)
            # N-1 whole GPUs + four halves (two devices' worth) ask for N+1 devices on N.
            total = 0
            for i in range(n - 1):
                ws.create(kai_cluster.pin(kai_cluster.pod(self.p, f"whole-{i}", q, group="mixed", gpus=1), [node]))
                total += 1
            for i in range(4):
                ws.create(kai_cluster.pin(kai_cluster.pod(self.p, f"half-{i}", q, group="mixed", fraction=0.5),
                                          [node]))
                total += 1
            done, pending = self.settle(ws, "mixed", total)
            placements = self.placements(ws, "mixed")
            self.record(res, placements)
            self.no_oversubscription(placements)
            used = kai_math.devices_used(placements).get(node, 0.0)
            res.details["devices_used"] = used
            if not pending:
                raise base.CaseFailed(f"all {total} pods scheduled on {n} GPUs although they need {n + 1}")
            if used < n:
                raise base.CaseFailed(f"only {used:g} of {n} GPUs used while {len(pending)} pods wait")


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    s = _Suite(ctx)
    try:
        return kai_cluster.run_with_preflight(NAME, ctx, s.preflight, [
            ("two_halves_share_one_gpu", s.two_halves_share_one_gpu),
            ("fill_gpus_at_seventy_percent", s.fill_gpus_at_seventy_percent),
            ("gpu_memory_that_fits", s.gpu_memory_that_fits),
            ("gpu_memory_larger_than_any_gpu", s.gpu_memory_larger_than_any_gpu),
            ("whole_and_fractional_never_oversubscribe", s.whole_and_fractional_never_oversubscribe),
        ])
    finally:
        s.kube.close()
