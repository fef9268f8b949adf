"""The work a Kueue bundle carries through an upgrade, started in the teams' own queues.

From the old version's rendering (team-queues' ClusterQueues and LocalQueues) it picks the
teams and starts, each as a batch/v1 Job naming the team's LocalQueue:

- two single-GPU preemptible Jobs (PriorityClass ``train``) in the first preemptible team;
- a gang: one Job of up to 4 pods (Kueue admits it whole) in the second preemptible team;
- two single-GPU non-preemptible Jobs (``inference``) in the first non-preemptible team;
- one pending Job in the second preemptible team, one GPU larger than what the whole queue tree
  has left, so the old version cannot admit it.

The set is waited for (everything but the pending Job admitted and running, the pending Job held
back by Kueue) before the upgrade, compared after it (``upgrade.state``), and removed at the end.

Called by ``pipelines.upgrade``. Talks only to the Kubernetes API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client
from gpucatalog.validators.conformance.kueue import space as kueue_space
from gpucatalog.validators.conformance.upgrade import state as upgrade_state

PENDING = "upgrade-pending"
LABEL = "gpu-catalog.dev/upgrade"


@dataclass(frozen=True)
class Team:
    name: str  # the ClusterQueue
    namespace: str
    local_queue: str
    quota: int
    preemptible: bool


@dataclass
class Plan:
    jobs: list[tuple[Team, str, int, bool]] = field(default_factory=list)  # team, job, pods, preemptible
    pending: tuple[Team, str, int] | None = None
    pool: int = 0  # GPUs the old queue tree guarantees in all

    @property
    def namespaces(self) -> list[str]:
        out = [t.namespace for t, *_ in self.jobs] + ([self.pending[0].namespace] if self.pending else [])
        return sorted(set(out))


def _gpu_quota(spec: dict[str, Any]) -> int:
    total = 0
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if res.get("name") == gpu_inventory.GPU:
                    total += int(float(str(res.get("nominalQuota", 0))))
    return total


def teams(objects: list[dict[str, Any]]) -> list[Team]:
    """The teams of a rendering: ClusterQueues labelled as teams, with their LocalQueue."""
    local = {o["spec"]["clusterQueue"]: o["metadata"] for o in objects if o.get("kind") == "LocalQueue"}
    out = []
    for o in objects:
        md = o.get("metadata") or {}
        preemptible = upgrade_state.team_preemptible(md.get("labels") or {})
        if o.get("kind") != "ClusterQueue" or preemptible is None or md["name"] not in local:
            continue
        lq = local[md["name"]]
        out.append(Team(md["name"], lq["namespace"], lq["name"], _gpu_quota(o.get("spec") or {}), preemptible))
    return out


def pool(objects: list[dict[str, Any]]) -> int:
    """GPUs every ClusterQueue and Cohort of the rendering guarantees together."""
    return sum(_gpu_quota(o.get("spec") or {}) for o in objects if o.get("kind") in ("ClusterQueue", "Cohort"))


def plan(objects: list[dict[str, Any]]) -> Plan:
    """What to run, or CaseFailed when the rendering lacks the teams a set needs."""
    pre, non = upgrade_state.work_teams(teams(objects))
    p = Plan(pool=pool(objects))
    gang = min(4, pre[1].quota)
    p.jobs = [(pre[0], "upgrade-train-0", 1, True), (pre[0], "upgrade-train-1", 1, True),
              (pre[1], "upgrade-gang", gang, True),
              (non[0], "upgrade-serve-0", 1, False), (non[0], "upgrade-serve-1", 1, False)]
    used = sum(n for _, _, n, _ in p.jobs)
    p.pending = (pre[1], PENDING, p.pool - used + 1)
    return p


class WorkloadSet:
    def __init__(self, kube: kube_client.Kube, p: Plan, params: kueue_space.KueueParams) -> None:
        self.kube, self.plan, self.p = kube, p, params

    def describe(self) -> dict[str, Any]:
        p = self.plan
        return {"jobs": [f"{t.namespace}/{n} ({s} GPU)" for t, n, s, _ in p.jobs],
                "pending": f"{p.pending[0].namespace}/{p.pending[1]} ({p.pending[2]} GPU)" if p.pending else ""}

    def snapshot(self) -> upgrade_state.Snapshot:
        # not the probes' namespace: probes come and go (their queue objects are compared, cluster-wide)
        return upgrade_state.take(self.kube, self.plan.namespaces)

    def compare(self, before: upgrade_state.Snapshot, after: upgrade_state.Snapshot, to_objects: list[dict[str, Any]],
                from_objects: list[dict[str, Any]], ref: str) -> tuple[list[str], list[str]]:
        """(problems with running work, problems with queue objects)."""
        problems = upgrade_state.compare(before, after, upgrade_state.rendered_queues(to_objects),
                                         upgrade_state.rendered_queues(from_objects), ref)
        queues = [p for p in problems if p.startswith(tuple(upgrade_state.QUEUE_KINDS))]
        return [p for p in problems if p not in queues], queues

    def _job(self, team: Team, name: str, size: int, preemptible: bool) -> None:
        pod: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "priorityClassName": self.p.preemptible_class if preemptible else self.p.non_preemptible_class,
            "tolerations": [{"key": gpu_inventory.GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": self.p.workload_image, "resources": {
                "requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {gpu_inventory.GPU: "1"}}}],
        }
        body = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "labels": {kueue_space.QUEUE_LABEL: team.local_queue, LABEL: name}},
                "spec": {"parallelism": size, "completions": size, "backoffLimit": 0, "suspend": True,
                         "template": {"metadata": {"labels": {LABEL: name},
                                                   "annotations": {kueue_space.RUN_FOR: self.p.run_for}},
                                      "spec": pod}}}
        self.kube.call(f"create Job {team.namespace}/{name}", self.kube.batch.create_namespaced_job, team.namespace, body)

    def start(self) -> None:
        for team, name, size, preemptible in self.plan.jobs:
            self._job(team, name, size, preemptible)
        base.wait_for("the upgrade's running Jobs to be admitted and their pods running", self._all_running,
                      self.p.wait_seconds, interval=1.0)
        if self.plan.pending is not None:
            team, name, size = self.plan.pending
            self._job(team, name, size, True)
            base.wait_for(f"Kueue to hold back Job {team.namespace}/{name} ({size} GPUs)", self._pending_held,
                          self.p.wait_seconds, interval=1.0)

    def _running(self, ns: str, job: str, size: int) -> bool:
        pods = self.kube.call(f"list pods of {job}", self.kube.core.list_namespaced_pod, ns,
                              label_selector=f"{LABEL}={job}").items
        up = [x for x in pods if x.spec.node_name and x.status and x.status.phase == "Running"
              and x.metadata.deletion_timestamp is None]
        return len(up) >= size

    def _all_running(self) -> bool:
        return all(self._running(t.namespace, name, size) for t, name, size, _ in self.plan.jobs)

    def _workload(self, ns: str, job: str) -> dict[str, Any] | None:
        found = self.kube.call("list Workloads", self.kube.custom.list_namespaced_custom_object,
                               kueue_space.GROUP, kueue_space.VERSION, ns, "workloads")
        for w in found.get("items", []):
            if any(o.get("kind") == "Job" and o.get("name") == job for o in w["metadata"].get("ownerReferences") or []):
                return dict(w)
        return None

    def _conds(self, ns: str, job: str) -> dict[str, str]:
        w = self._workload(ns, job)
        if w is None:
            return {}
        return {c.get("type"): c.get("status") for c in (w.get("status") or {}).get("conditions") or []}

    def _pending_held(self) -> bool:
        assert self.plan.pending is not None
        team, name, _ = self.plan.pending
        conds = self._conds(team.namespace, name)
        return conds.get("QuotaReserved") == "False" and conds.get("Admitted") != "True"

    def pending_admitted(self) -> bool:
        if self.plan.pending is None:
            return True
        team, name, size = self.plan.pending
        return self._conds(team.namespace, name).get("Admitted") == "True" and self._running(team.namespace, name, size)

    def release_running(self) -> None:
        """Delete the running Jobs (after they were checked), so the pending one has room."""
        for team, name, _, _ in self.plan.jobs:
            self._delete(team.namespace, name)

    def _delete(self, ns: str, name: str) -> None:
        try:
            self.kube.batch.delete_namespaced_job(name, ns, propagation_policy="Background")
            self.kube.core.delete_collection_namespaced_pod(ns, label_selector=f"{LABEL}={name}", grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise base.CaseFailed(f"delete Job {ns}/{name}: {kube_client.http_error(exc)}") from exc

    def cleanup(self) -> None:
        self.release_running()
        if self.plan.pending is not None:
            self._delete(self.plan.pending[0].namespace, self.plan.pending[1])
