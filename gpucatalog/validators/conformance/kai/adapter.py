"""KAI Scheduler's side of the queueing contract (``queueing.contract``).

How KAI expresses the contract: departments and teams are Queues (``parentQueue``); a workload
names its team with the ``kai.scheduler/queue`` label; a unit is a bare pod; preemptibility comes
from the PriorityClass (train / inference); a gang is an explicit PodGroup (``minMember``) and a
Job is grouped by KAI's pod-grouper (``kai.scheduler/batch-min-member``); "held back" is the pod's
PodScheduled=False reason; a half-started gang shows as a bound pod or a BindRequest.

Called by ``quota_reclaim`` and ``gang`` (through ``queueing_contract.run``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpucatalog.validators.conformance.kai import params as kai_params
from gpucatalog.validators.conformance.kai import pods as kai_pods
from gpucatalog.validators.conformance.kai import preflight as kai_preflight
from gpucatalog.validators.conformance.kai import workspace as kai_workspace
from gpucatalog.validators.conformance.kit import base, kube_client
from gpucatalog.validators.conformance.queueing import contract as queueing_contract

COMPONENTS = ["scheduler", "binder", "pod-grouper"]
BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"
SKIP_PODGROUPER = "kai.scheduler/skip-podgrouper"


def job_body(p: kai_params.Params, name: str, queue: str, node: str, n: int, group: str = "job") -> dict[str, Any]:
    """A batch/v1 Job of ``n`` one-GPU pods on ``node`` that KAI must gang (batch-min-member)."""
    template = kai_pods.pin(kai_pods.pod(p, "job", queue, group=group, gpus=1), [node] if node else [])
    template["metadata"].pop("name")
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": {BATCH_MIN_MEMBER: str(n)},
                         "labels": {p.queue_label_key: queue}},
            "spec": {"parallelism": n, "completions": n, "backoffLimit": 0,
                     "template": {"metadata": template["metadata"], "spec": template["spec"]}}}


class KaiSpace:
    """A KAI workspace seen through the contract's ``Space``."""

    partial_gangs = True  # a PodGroup's pods arrive one by one

    def __init__(self, kube: kube_client.Kube, p: kai_params.Params, ws: kai_workspace.Workspace) -> None:
        self.kube = kube
        self.p = p
        self.ws = ws
        self.ns = ws.ns
        self.queue: dict[str, str] = {}

    def build(self, root: queueing_contract.Dept) -> None:
        for node, parent in root.walk():
            self.queue[node.name] = self.ws.queue(
                f"{self.ns}-{node.name}", parent=self.queue[parent.name] if parent else "",
                quota=node.quota, weight=node.weight)

    def _class(self, preemptible: bool) -> str:
        return self.p.preemptible_class if preemptible else self.p.non_preemptible_class

    def submit(self, team: str, group: str, count: int, nodes: list[str], *, start: int = 0,
               preemptible: bool = True) -> None:
        for i in range(start, start + count):
            body = kai_pods.pod(self.p, f"{group}-{i}", self.queue[team], group=group, gpus=1,
                                priority_class=self._class(preemptible))
            self.ws.create(kai_pods.pin(body, nodes))

    def gang(self, team: str, group: str, size: int, node: str, members: int | None = None) -> None:
        body = kai_pods.pod_group(group, self.ns, self.queue[team], size, self.p.preemptible_class)
        self.kube.call(f"create PodGroup {group}", self.kube.custom.create_namespaced_custom_object,
                       kai_params.GROUP, "v2alpha2", self.ns, "podgroups", body)
        for i in range(size if members is None else members):
            self.gang_member(team, group, size, node, i)

    def gang_member(self, team: str, group: str, size: int, node: str, i: int) -> None:
        # skip-podgrouper: KAI's pod-grouper must not regroup pods that join an explicit PodGroup.
        pod = kai_pods.pod(self.p, f"{group}-{i}", self.queue[team], group=group, gpus=1, pod_group=group,
                           priority_class=self.p.preemptible_class, annotations={SKIP_PODGROUPER: "true"})
        self.ws.create(kai_pods.pin(pod, [node] if node else []))

    def job(self, team: str, group: str, size: int, node: str) -> None:
        body = job_body(self.p, group, self.queue[team], node, size, group=group)
        self.kube.call(f"create Job {group}", self.kube.batch.create_namespaced_job, self.ns, body)

    def scheduled(self, group: str) -> list[Any]:
        return [x for x in self.ws.group_pods(group)
                if kai_pods.is_scheduled(x) and x.metadata.deletion_timestamp is None]

    def held_back(self, group: str) -> list[str]:
        return [r for r in (kai_pods.unschedulable_reason(x) for x in self.ws.group_pods(group)) if r]

    def started(self, group: str) -> list[str]:
        bound = [f"pod {x.metadata.name} on {x.spec.node_name}" for x in self.ws.group_pods(group) if x.spec.node_name]
        asked = [f"BindRequest for {b['spec'].get('podName')}" for b in self.ws.bind_requests()
                 if str(b["spec"].get("podName", "")).startswith(f"{group}-")]
        return bound + asked

    def remove(self, group: str, *, only_pending: bool = False, one: bool = False) -> None:
        pods = self.ws.group_pods(group)
        if only_pending:  # KAI deletes the pods it preempts: nothing of A waits for a second chance
            pods = [x for x in pods if not kai_pods.is_scheduled(x)]
        for x in pods[:1] if one else pods:
            self.ws.delete_pod(x.metadata.name)

    def units(self, group: str) -> int:
        return len(self.ws.group_pods(group))

    def gang_unit(self, group: str) -> dict[str, Any] | None:
        for pg in self.ws.pod_groups():
            return {"kind": "PodGroup", "name": pg["metadata"]["name"], "members": pg["spec"].get("minMember")}
        return None

    def extras(self, case: str) -> dict[str, Any]:
        if case != "non_preemptible_stays_within_quota":
            return {}
        reasons = {str(c.get("reason", "")) for pg in self.ws.pod_groups()
                   for c in (pg.get("status") or {}).get("schedulingConditions") or []}
        return {"podgroup_reasons": sorted(reasons)}


class KaiAdapter:
    """KAI's preflight (components, Config, PriorityClasses, GPUs) and watchdog, and its spaces."""

    stack = "kai"

    def __init__(self, ctx: base.SuiteContext) -> None:
        self.p = kai_params.Params.from_ctx(ctx)
        self.kube = kube_client.Kube(ctx.kubeconfig)
        self.wait_seconds = self.p.wait_seconds
        self.settle_seconds = self.p.settle_seconds
        self.dog: kai_preflight.Watchdog | None = None

    def preflight(self, res: base.CaseResult) -> None:
        res.details.update(kai_preflight.preflight(
            self.kube, self.p, COMPONENTS, min_gpus=2,
            priority_classes=(self.p.preemptible_class, self.p.non_preemptible_class)))
        self.dog = kai_preflight.Watchdog(self.kube, self.p, COMPONENTS)

    def watchdog(self) -> kai_preflight.Watchdog:
        if self.dog is None:
            self.dog = kai_preflight.Watchdog(self.kube, self.p, COMPONENTS)
        return self.dog

    def begin_case(self) -> None:
        """Wait until every component the contract needs has a ready pod again (one that crashed
        failed the case it crashed in), then count restarts from here."""
        kai_preflight.wait_ready(self.kube, self.p, COMPONENTS)
        self.watchdog().rebase()

    def end_case(self) -> None:
        self.watchdog().check(force=True)

    def guard(self) -> None:
        self.watchdog().check()

    def not_applicable(self, case: str) -> str:
        return ""  # KAI expresses every case of the contract

    @contextmanager
    def space(self, suite: str, res: base.CaseResult) -> Iterator[KaiSpace]:
        with kai_workspace.workspace(self.kube, self.p, suite, res) as ws:
            yield KaiSpace(self.kube, self.p, ws)

    def close(self) -> None:
        self.kube.close()
