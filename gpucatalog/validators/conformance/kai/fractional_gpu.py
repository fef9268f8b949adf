"""Conformance suite ``fractional_gpu``: KAI shares GPUs between pods that ask for part of one
(``gpu-fraction`` or ``gpu-memory``) and never overcommits a device.

Cases: two half-GPU pods share one GPU; 2N pods at 0.7 on N free GPUs schedule exactly N; a
``gpu-memory`` request that fits lands on a shared GPU (a GPU group held by a reservation pod) and
one larger than any GPU stays pending for lack of GPU memory; whole-GPU and fractional pods
together never oversubscribe a physical GPU or a node, counting every tenant's pods and KAI's
reservation pods. Each case records
its placements (pod, node, GPU, fraction) in ``details["placements"]``.

Called through ``SUITES`` by the certify pipeline; talks only to the Kubernetes API.
"""

from __future__ import annotations

import re

from gpucatalog.validators.conformance.kai import math as kai_math
from gpucatalog.validators.conformance.kai import pods as kai_pods
from gpucatalog.validators.conformance.kai import preflight as kai_preflight
from gpucatalog.validators.conformance.kai import suite as kai_suite
from gpucatalog.validators.conformance.kai import workspace as kai_workspace
from gpucatalog.validators.conformance.kit import base, gpu_inventory

NAME = "fractional_gpu"
GPU_MEMORY_REASON = re.compile(r"gpu memory", re.IGNORECASE)
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

    def no_oversubscription(self) -> None:
        """No physical GPU or node is overcommitted, counting every tenant's pods and KAI's
        reservation pods, not only this case's."""
        uses = kai_pods.gpu_uses(self.kube, self.p, gpu_inventory.gpu_memory_mib(self.kube))
        problems = kai_math.oversubscription(uses, gpu_inventory.gpu_capacity(self.kube))
        if problems:
            raise base.CaseFailed("GPU oversubscribed: " + "; ".join(problems))

    def shared_gpu_of(self, pod_name: str, ws: kai_workspace.Workspace, group: str) -> str:
        """Wait until KAI put scheduled pod ``pod_name`` on a shared GPU: a GPU group label and a
        reservation pod of that group holding a device on the pod's node; returns the group."""
        seen = {"node": "", "group": ""}

        def probe() -> str | None:
            pod_obj = next((x for x in ws.group_pods(group) if x.metadata.name == pod_name), None)
            if pod_obj is None:
                return None
            seen["node"] = node = pod_obj.spec.node_name or ""
            seen["group"] = gpu_group = (pod_obj.metadata.labels or {}).get(kai_pods.GPU_GROUP_LABEL, "")
            held = gpu_group and any(r.spec.node_name == node for r in kai_pods.reservation_pods(self.kube, self.p, gpu_group))
            return gpu_group if node and held else None

        try:
            return self.wait(f"pod {pod_name} to use a shared GPU", probe)
        except base.WaitTimeout as exc:
            if not seen["group"]:
                raise base.CaseFailed(f"pod {pod_name} was scheduled on {seen['node'] or 'no node'} but KAI gave it "
                                      f"no GPU group ({kai_pods.GPU_GROUP_LABEL}): it does not use a shared GPU") from exc
            raise base.CaseFailed(f"pod {pod_name} is in GPU group {seen['group']}, but no reservation pod of that "
                                  f"group holds a GPU on {seen['node'] or 'its node'} "
                                  f"(namespace {self.p.reservation_namespace})") from exc

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
            self.no_oversubscription()

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
            self.no_oversubscription()
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
            # Scheduled is not enough: a scheduler that ignores gpu-memory would bind it too.
            res.details["gpu_group"] = self.shared_gpu_of("mem-fits", ws, "mem")
            placements = self.placements(ws, "mem")
            self.record(res, placements)
            if not placements or placements[0].fraction <= 0:
                raise base.CaseFailed("the gpu-memory pod's share of its GPU is unknown (no gpu.memory label on its node)")
            self.no_oversubscription()

    def gpu_memory_larger_than_any_gpu(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        ask = max(self._memory().values()) * 2
        res.details["gpu_memory_mib"] = ask
        with kai_workspace.workspace(self.kube, self.p, "frac", res) as ws:
            q = ws.leaf_queue()
            ws.create(kai_pods.pod(self.p, "mem-too-big", q, group="big", gpu_memory=ask))
            done, pending = self.settle(ws, "big", 1)
            if done:
                raise base.CaseFailed(f"a {ask} MiB gpu-memory pod was scheduled on {done[0].spec.node_name}")
            reason = kai_pods.unschedulable_reason(pending[0])
            res.details["reason"] = reason
            # KAI says why: "… didn't have enough resources: GPU memory" / "… gpu memory capacity of …".
            if not GPU_MEMORY_REASON.search(reason):
                raise base.CaseFailed(f"the {ask} MiB gpu-memory pod is pending, but not for lack of GPU memory: {reason}")
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
            self.no_oversubscription()
            used = kai_math.devices_used(placements).get(node, 0.0)
            res.details["devices_used"] = used
            if not pending:
                raise base.CaseFailed(f"all {total} pods scheduled on {n} GPUs although they need {n + 1}")
            if used < n:
                raise base.CaseFailed(f"only {used:g} of {n} GPUs used while {len(pending)} pods wait")


# The cases, in run order; each is the _Suite method of that name (behind the preflight).
CASE_NAMES = ("two_halves_share_one_gpu", "fill_gpus_at_seventy_percent", "gpu_memory_that_fits",
              "gpu_memory_larger_than_any_gpu", "whole_and_fractional_never_oversubscribe")


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    s = _Suite(ctx)
    return s.run(NAME, ctx, [(n, getattr(s, n)) for n in CASE_NAMES])
