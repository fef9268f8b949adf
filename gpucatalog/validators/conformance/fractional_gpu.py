"""Conformance suite ``fractional_gpu``: KAI shares GPUs between pods that ask for part of one
(``gpu-fraction`` or ``gpu-memory``) and never overcommits a device.

Cases: two half-GPU pods share one GPU; 2N pods at 0.7 on N free GPUs schedule exactly N; a
``gpu-memory`` request that fits schedules and one larger than the GPU stays pending with a
reason; whole-GPU and fractional pods together never oversubscribe a device. Each case records
its placements (pod, node, GPU, fraction) in ``details["placements"]``.

Called through ``SUITES`` by the certify pipeline; talks only to the Kubernetes API.
"""

from __future__ import annotations

from gpucatalog.validators.conformance import (
    base,
    gpu_inventory,
    kai_math,
    kai_pods,
    kai_preflight,
    kai_suite,
    kai_workspace,
)

NAME = "fractional_gpu"
COMPONENTS = ["scheduler", "binder", "pod-grouper", "admission"]


class _Suite(kai_suite.KaiSuite):
    components = COMPONENTS

    # -- helpers -------------------------------------------------------------------------------

    def placements(self, ws: kai_workspace.Workspace, group: str) -> list[kai_math.Placement]:
        memory = gpu_inventory.gpu_memory_mib(self.kube)
        return [kai_pods.placement(self.kube, self.p, pod, memory)
                for pod in ws.group_pods(group) if kai_pods.is_scheduled(pod)]

    def record(self, res: base.CaseResult, placements: list[kai_math.Placement]) -> None:
        res.details["placements"] = [pl.to_dict() for pl in placements]

    def no_oversubscription(self, placements: list[kai_math.Placement]) -> None:
        problems = kai_math.oversubscription(placements, gpu_inventory.gpu_capacity(self.kube))
        if problems:
            raise base.CaseFailed("GPU oversubscribed: " + "; ".join(problems))

    # -- cases ---------------------------------------------------------------------------------

    def preflight(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        # Unlike KaiSuite's: fraction pods need no PriorityClass; the free GPUs are recorded.
        res.details.update(kai_preflight.preflight(self.kube, self.p, COMPONENTS, min_gpus=2))
        res.details["free_gpus"] = sum(gpu_inventory.free_gpus(self.kube).values())
        self.watchdog()

    def two_halves_share_one_gpu(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        with kai_workspace.workspace(self.kube, self.p, "frac", res) as ws:
            q = ws.leaf_queue()
            for i in range(2):
                ws.create(kai_pods.pod(self.p, f"half-{i}", q, group="halves", fraction=0.5))
            done, pending = self.settle(ws, "halves", 2)
            if pending:
                raise base.CaseFailed(f"{len(pending)} half-GPU pod(s) not scheduled: "
                                      f"{kai_pods.unschedulable_reason(pending[0])}")
            placements = self.placements(ws, "halves")
            self.record(res, placements)
            where = {(pl.node, pl.gpu) for pl in placements}
            if len(where) != 1 or not placements[0].gpu:
                raise base.CaseFailed(f"the two 0.5 pods did not share one GPU: {sorted(where)}")

    def fill_gpus_at_seventy_percent(self, ctx: base.SuiteContext, res: base.CaseResult) -> None:
        # Use whole nodes up to max_fill_gpus free GPUs, and pin the pods there, so "exactly N"
        # is exact even when the cluster has more free GPUs than the case fills.
        cap = int(ctx.params.get("max_fill_gpus", 32))
        nodes, n = gpu_inventory.whole_nodes(gpu_inventory.free_gpus(self.kube), cap)
        if n < 1:
            raise base.CaseFailed("no free GPU to fill")
        res.details.update({"gpus": n, "nodes": nodes})
        with kai_workspace.workspace(self.kube, self.p, "frac", res) as ws:
            q = ws.leaf_queue()
            for i in range(2 * n):
                ws.create(kai_pods.pin(kai_pods.pod(self.p, f"seventy-{i}", q, group="seventy", fraction=0.7),
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
            self.stays(f"{n} pods at 0.7 scheduled and no more",
                       lambda: sum(kai_pods.is_scheduled(x) for x in ws.group_pods("seventy")) == n)

    def _memory(self) -> dict[str, int]:
        memory = gpu_inventory.gpu_memory_mib(self.kube)
        if not memory:
            raise base.CaseFailed(f"no node carries the {gpu_inventory.GPU_MEMORY_LABEL} label KAI needs for gpu-memory")
        return memory

    def gpu_memory_that_fits(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        ask = min(self._memory().values()) // 4
        res.details["gpu_memory_mib"] = ask
        with kai_workspace.workspace(self.kube, self.p, "frac", res) as ws:
            q = ws.leaf_queue()
            ws.create(kai_pods.pod(self.p, "mem-fits", q, group="mem", gpu_memory=ask))
            done, pending = self.settle(ws, "mem", 1)
            if pending:
                raise base.CaseFailed(f"a {ask} MiB gpu-memory pod did not schedule: "
                                      f"{kai_pods.unschedulable_reason(pending[0])}")
            self.record(res, self.placements(ws, "mem"))

    def gpu_memory_larger_than_any_gpu(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        ask = max(self._memory().values()) * 2
        res.details["gpu_memory_mib"] = ask
        with kai_workspace.workspace(self.kube, self.p, "frac", res) as ws:
            q = ws.leaf_queue()
            ws.create(kai_pods.pod(self.p, "mem-too-big", q, group="big", gpu_memory=ask))
            done, pending = self.settle(ws, "big", 1)
            if done:
                raise base.CaseFailed(f"a {ask} MiB gpu-memory pod was scheduled on {done[0].spec.node_name}")
            res.details["reason"] = kai_pods.unschedulable_reason(pending[0])
            self.stays("the oversized gpu-memory pod pending",
                       lambda: not any(kai_pods.is_scheduled(x) for x in ws.group_pods("big")))

    def whole_and_fractional_never_oversubscribe(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        node, n = gpu_inventory.roomiest_node(gpu_inventory.free_gpus(self.kube), 2)
        res.details.update({"node": node, "free_gpus": n})
        with kai_workspace.workspace(self.kube, self.p, "frac", res) as ws:
            q = ws.leaf_queue()
            # N-1 whole GPUs + four halves (two devices' worth) ask for N+1 devices on N.
            total = 0
            for i in range(n - 1):
                ws.create(kai_pods.pin(kai_pods.pod(self.p, f"whole-{i}", q, group="mixed", gpus=1), [node]))
                total += 1
            for i in range(4):
                ws.create(kai_pods.pin(kai_pods.pod(self.p, f"half-{i}", q, group="mixed", fraction=0.5),
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
    return s.run(NAME, ctx, [
        ("two_halves_share_one_gpu", s.two_halves_share_one_gpu),
        ("fill_gpus_at_seventy_percent", s.fill_gpus_at_seventy_percent),
        ("gpu_memory_that_fits", s.gpu_memory_that_fits),
        ("gpu_memory_larger_than_any_gpu", s.gpu_memory_larger_than_any_gpu),
        ("whole_and_fractional_never_oversubscribe", s.whole_and_fractional_never_oversubscribe),
    ])
