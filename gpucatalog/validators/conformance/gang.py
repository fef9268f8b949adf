"""Conformance suite ``gang``: a group of pods with ``minMember`` N starts all N or none.

Cases:
- ``gang_with_room_starts_together``: an explicit PodGroup (minMember N) and N one-GPU pods all
  schedule; the spread of their scheduling times is recorded.
- ``gang_short_of_one_gpu_starts_none_then_all``: with room for N-1 (the rest held by
  non-preemptible pods of another queue) no pod of the gang is bound and no BindRequest is
  left behind; when one GPU frees up, all N start together.
- ``job_with_batch_min_member``: a batch/v1 Job annotated ``kai.scheduler/batch-min-member: N``
  gets a PodGroup with minMember N from KAI's pod-grouper, and all N pods schedule.

Called through ``SUITES`` by the certify pipeline; talks only to the Kubernetes API.
"""

from __future__ import annotations

import time
from typing import Any

from gpucatalog.validators.conformance import (
    base,
    gpu_inventory,
    kai_params,
    kai_pods,
    kai_suite,
    kai_workspace,
)

NAME = "gang"
COMPONENTS = ["scheduler", "binder", "pod-grouper"]
BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"
SKIP_PODGROUPER = "kai.scheduler/skip-podgrouper"


def job_body(p: kai_params.Params, name: str, queue: str, node: str, n: int) -> dict[str, Any]:
    """A batch/v1 Job of ``n`` one-GPU pods on ``node`` that KAI must gang (batch-min-member)."""
    template = kai_pods.pin(kai_pods.pod(p, "job", queue, group="job", gpus=1), [node])
    template["metadata"].pop("name")
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": {BATCH_MIN_MEMBER: str(n)},
                         "labels": {p.queue_label_key: queue}},
            "spec": {"parallelism": n, "completions": n, "backoffLimit": 0,
                     "template": {"metadata": template["metadata"], "spec": template["spec"]}}}


class _Suite(kai_suite.KaiSuite):
    components = COMPONENTS

    def __init__(self, ctx: base.SuiteContext) -> None:
        super().__init__(ctx)
        self.size = int(ctx.params.get("gang_size", 4))

    def roomiest_node(self, need: int) -> tuple[str, int]:
        # Ties go to the last node by name (``gpu_inventory.roomiest_node`` takes the first).
        node, free = max(gpu_inventory.free_gpus(self.kube).items(), key=lambda kv: (kv[1], kv[0]))
        if free < need:
            raise base.CaseFailed(f"needs a node with {need} free GPUs; best is {node} with {free}")
        return node, free

    def pod_group(self, ws: kai_workspace.Workspace, name: str, queue: str, min_member: int) -> None:
        body = kai_pods.pod_group(name, ws.ns, queue, min_member, self.p.preemptible_class)
        self.kube.call(f"create PodGroup {name}", self.kube.custom.create_namespaced_custom_object,
                       kai_params.GROUP, "v2alpha2", ws.ns, "podgroups", body)

    def gang(self, ws: kai_workspace.Workspace, queue: str, node: str, n: int) -> None:
        self.pod_group(ws, "gang", queue, n)
        for i in range(n):
            # skip-podgrouper: KAI's pod-grouper must not regroup pods that join an explicit PodGroup.
            body = kai_pods.pod(self.p, f"gang-{i}", queue, group="gang", gpus=1, pod_group="gang",
                                priority_class=self.p.preemptible_class,
                                annotations={SKIP_PODGROUPER: "true"})
            ws.create(kai_pods.pin(body, [node]))

    def all_scheduled(self, ws: kai_workspace.Workspace, group: str, n: int, what: str) -> list[Any]:
        def probe() -> list[Any] | None:
            pods = [x for x in ws.group_pods(group) if kai_pods.is_scheduled(x)]
            return pods if len(pods) >= n else None

        return self.wait(what, probe)

    def spread(self, pods: list[Any], res: base.CaseResult) -> None:
        times = [t for t in (kai_pods.scheduled_at(x) for x in pods) if t is not None]
        if times:
            res.details["scheduled_spread_s"] = round(max(times) - min(times), 3)

    def bind_requests(self, ws: kai_workspace.Workspace) -> list[str]:
        return [str(b["spec"].get("podName", "")) for b in ws.bind_requests()]

    # -- cases (the preflight is KaiSuite's) ---------------------------------------------------

    def gang_with_room_starts_together(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        node, free = self.roomiest_node(2)
        n = min(self.size, free)
        res.details.update({"node": node, "min_member": n})
        with kai_workspace.workspace(self.kube, self.p, "gang", res) as ws:
            q = ws.leaf_queue()
            t0 = time.monotonic()
            self.gang(ws, q, node, n)
            pods = self.all_scheduled(ws, "gang", n, f"all {n} pods of the gang to be scheduled")
            res.details["all_scheduled_after_s"] = round(time.monotonic() - t0, 3)
            self.spread(pods, res)

    def gang_short_of_one_gpu_starts_none_then_all(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        node, free = self.roomiest_node(2)
        n = min(self.size, free)
        fillers = free - (n - 1)
        res.details.update({"node": node, "min_member": n, "free_gpus": free, "fillers": fillers})
        with kai_workspace.workspace(self.kube, self.p, "gang", res) as ws:
            root = ws.queue(f"{ws.ns}-root", quota=fillers)
            hold = ws.queue(f"{ws.ns}-hold", parent=root, quota=fillers)
            q = ws.queue(f"{ws.ns}-q", parent=root, quota=0)
            # Non-preemptible, in-quota pods of another queue: the gang may neither preempt nor reclaim them.
            for i in range(fillers):
                body = kai_pods.pod(self.p, f"filler-{i}", hold, group="filler", gpus=1,
                                    priority_class=self.p.non_preemptible_class)
                ws.create(kai_pods.pin(body, [node]))
            self.all_scheduled(ws, "filler", fillers, f"{fillers} filler pods to hold all but {n - 1} GPUs of {node}")
            self.gang(ws, q, node, n)

            def all_refused() -> bool | None:
                pods = ws.group_pods("gang")
                return len(pods) == n and all(kai_pods.unschedulable_reason(x) for x in pods) or None

            self.wait(f"KAI to mark all {n} gang pods unschedulable", all_refused)

            def none_bound() -> bool:
                pods = ws.group_pods("gang")
                bound = [x.metadata.name for x in pods if x.spec.node_name]
                gang_requests = [b for b in self.bind_requests(ws) if b.startswith("gang-")]
                if bound or gang_requests:
                    raise base.CaseFailed(f"gang half-bound with room for {n - 1}: pods on nodes {bound}, "
                                          f"BindRequests for {gang_requests}")
                return True

            self.stays("no gang pod bound", none_bound)
            res.details["pending_reason"] = kai_pods.unschedulable_reason(ws.group_pods("gang")[0])
            t0 = time.monotonic()
            ws.delete_pod("filler-0")
            pods = self.all_scheduled(ws, "gang", n, f"all {n} gang pods to start once one GPU freed up")
            res.details["started_after_s"] = round(time.monotonic() - t0, 3)
            self.spread(pods, res)

    def job_with_batch_min_member(self, _ctx: base.SuiteContext, res: base.CaseResult) -> None:
        node, free = self.roomiest_node(2)
        n = min(self.size, free)
        res.details.update({"node": node, "min_member": n})
        with kai_workspace.workspace(self.kube, self.p, "gang", res) as ws:
            q = ws.leaf_queue()
            job = job_body(self.p, "gang-job", q, node, n)
            self.kube.call("create Job gang-job", self.kube.batch.create_namespaced_job, ws.ns, job)
            self.all_scheduled(ws, "job", n, f"all {n} pods of the Job to be scheduled")

            def group_of_job() -> dict[str, Any] | None:
                items = ws.pod_groups()
                return items[0] if items else None

            pg = self.wait("KAI's pod-grouper to create the Job's PodGroup", group_of_job)
            res.details["podgroup"] = {"name": pg["metadata"]["name"], "minMember": pg["spec"].get("minMember")}
            if pg["spec"].get("minMember") != n:
                raise base.CaseFailed(f"the Job's PodGroup has minMember {pg['spec'].get('minMember')}; expected {n}")
            # Let the Job controller's pods go with the namespace, not linger as orphans.
            self.kube.call("delete Job gang-job", self.kube.batch.delete_namespaced_job, "gang-job", ws.ns,
                           propagation_policy="Background")


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    s = _Suite(ctx)
    return s.run(NAME, ctx, [
        ("gang_with_room_starts_together", s.gang_with_room_starts_together),
        ("gang_short_of_one_gpu_starts_none_then_all", s.gang_short_of_one_gpu_starts_none_then_all),
        ("job_with_batch_min_member", s.job_with_batch_min_member),
    ])
