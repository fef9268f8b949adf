"""The work a KAI bundle carries through an upgrade, in the teams' own Queues.

From the old version's rendering (team-queues' Queues labelled as teams) it starts, as pods in a
namespace of its own (``upgrade-work``) naming their team with KAI's queue label:

- two one-GPU preemptible pods (PriorityClass ``train``) in the first preemptible team;
- a gang: an explicit PodGroup of up to 4 one-GPU pods (KAI starts all or none) in the second
  preemptible team;
- two one-GPU non-preemptible pods (``inference``) in the first non-preemptible team;
- one pending pod, non-preemptible, in a team whose GPU quota the new version raises, asking one
  GPU more than the old quota leaves it: KAI keeps non-preemptible work within its queue's
  quota (``NonPreemptibleOverQuota``), so the old version holds it back and the new one must
  schedule it. When the new version raises no team's quota there is no pending pod, and the
  evidence says so.

The set is waited for (everything but the pending pod running, the pending pod held back with
KAI's reason) before the upgrade, compared after it (``upgrade.state`` with KAI's Queues), and
removed at the end. ``KaiProber`` measures the scheduling gap with one-GPU pods in a Queue of
its own, outside every department.

Called by ``pipelines.upgrade``. Talks only to the Kubernetes API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kai import adapter as kai_adapter
from gpucatalog.validators.conformance.kai import params as kai_params
from gpucatalog.validators.conformance.kai import pods as kai_pods
from gpucatalog.validators.conformance.kai import workspace as kai_workspace
from gpucatalog.validators.conformance.kit import base, kube_client
from gpucatalog.validators.conformance.upgrade import probe as upgrade_probe
from gpucatalog.validators.conformance.upgrade import state as upgrade_state

NAMESPACE = "upgrade-work"
PROBES = "upgrade-probe"
PENDING = "upgrade-pending"
MAX_POD_GPUS = 8  # one pod's GPUs must fit on one node of the sim's shapes


@dataclass(frozen=True)
class Team:
    name: str  # the Queue
    quota: int
    preemptible: bool


def _quota(spec: dict[str, Any]) -> int:
    return int(float(str(((spec.get("resources") or {}).get("gpu") or {}).get("quota", 0))))


def _queues(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == "Queue"
            and str(o.get("apiVersion", "")).startswith(kai_params.GROUP + "/")]


def teams(objects: list[dict[str, Any]]) -> list[Team]:
    """The teams of a rendering: KAI Queues labelled as teams, in rendering order."""
    out = []
    for o in _queues(objects):
        md = o.get("metadata") or {}
        preemptible = upgrade_state.team_preemptible(md.get("labels") or {})
        if preemptible is not None:
            out.append(Team(md["name"], _quota(o.get("spec") or {}), preemptible))
    return out


@dataclass
class Plan:
    pods: list[tuple[Team, str, bool]] = field(default_factory=list)  # team, pod, preemptible (one GPU each)
    gang: tuple[Team, str, int] | None = None  # team, PodGroup, members
    pending: tuple[Team, str, int] | None = None  # team, pod, GPUs
    no_pending: str = ""  # why there is no pending pod

    @property
    def groups(self) -> list[tuple[Team, str, int]]:
        """Every running group: (team, group, pods)."""
        out = [(t, name, 1) for t, name, _ in self.pods]
        return out + ([self.gang] if self.gang else [])


def _non_preemptible_under(plan_pods: list[tuple[Team, str, bool]], queue: str, parents: dict[str, str]) -> int:
    """Non-preemptible GPUs the plan runs in ``queue`` or below it."""
    total = 0
    for t, _, pre in plan_pods:
        q = t.name
        while q and not pre:
            if q == queue:
                total += 1
                break
            q = parents.get(q, "")
    return total


def plan(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> Plan:
    """What to run, or CaseFailed when the old rendering lacks the teams a set needs."""
    all_teams = teams(old)
    pre, non = upgrade_state.work_teams(all_teams, "KAI teams")
    p = Plan(pods=[(pre[0], "upgrade-train-0", True), (pre[0], "upgrade-train-1", True),
                   (non[0], "upgrade-serve-0", False), (non[0], "upgrade-serve-1", False)],
             gang=(pre[1], "upgrade-gang", min(4, pre[1].quota)))
    new_quota = {o["metadata"]["name"]: _quota(o.get("spec") or {}) for o in _queues(new)}
    parents = {o["metadata"]["name"]: str((o.get("spec") or {}).get("parentQueue") or "") for o in _queues(new)}
    for t in all_teams:
        if new_quota.get(t.name, 0) <= t.quota:
            continue
        gpus = t.quota - _non_preemptible_under(p.pods, t.name, parents) + 1
        # the new version must have room for it in the team and in every queue above it
        q, fits = t.name, 0 < gpus <= MAX_POD_GPUS
        while q and fits:
            fits = _non_preemptible_under(p.pods, q, parents) + gpus <= new_quota.get(q, 0)
            q = parents.get(q, "")
        if fits:
            p.pending = (t, PENDING, gpus)
            return p
    p.no_pending = "the new version raises no team's GPU quota enough for a non-preemptible pod to wait on it"
    return p


class KaiWork:
    """``pipelines.upgrade.Work`` for KAI: start, snapshot, compare, release, clean up."""

    def __init__(self, kube: kube_client.Kube, p: Plan, params: kai_params.Params, namespace: str = NAMESPACE) -> None:
        self.kube, self.plan, self.p, self.ns = kube, p, params, namespace
        self.ws = kai_workspace.Workspace(kube, params, namespace)

    def describe(self) -> dict[str, Any]:
        p = self.plan
        out: dict[str, Any] = {"pods": [f"{self.ns}/{n} (queue {t.name}, 1 GPU, {'train' if pre else 'inference'})"
                                        for t, n, pre in p.pods]}
        if p.gang:
            out["gang"] = f"{self.ns}/{p.gang[1]} (queue {p.gang[0].name}, {p.gang[2]} pods of 1 GPU, all or none)"
        out["pending"] = (f"{self.ns}/{p.pending[1]} (queue {p.pending[0].name}, {p.pending[2]} GPUs, inference: "
                          f"over the old quota of {p.pending[0].quota})" if p.pending else p.no_pending)
        return out

    def _pod(self, team: Team, name: str, gpus: int, preemptible: bool, **kw: Any) -> dict[str, Any]:
        return kai_pods.pod(self.p, name, team.name, group=name, gpus=gpus, priority_class=(
            self.p.preemptible_class if preemptible else self.p.non_preemptible_class), **kw)

    def start(self) -> None:
        self.kube.call(f"create namespace {self.ns}", self.kube.core.create_namespace,
                       {"metadata": {"name": self.ns, "labels": {base.SUITE_LABEL: "upgrade"}}})
        kube_client.default_service_account(self.kube, self.ns)
        for team, name, preemptible in self.plan.pods:
            self.ws.create(self._pod(team, name, 1, preemptible))
        if self.plan.gang:
            team, name, size = self.plan.gang
            self.kube.call(f"create PodGroup {name}", self.kube.custom.create_namespaced_custom_object,
                           kai_params.GROUP, "v2alpha2", self.ns, "podgroups",
                           kai_pods.pod_group(name, self.ns, team.name, size, self.p.preemptible_class))
            for i in range(size):
                self.ws.create(kai_pods.pod(self.p, f"{name}-{i}", team.name, group=name, gpus=1, pod_group=name,
                                            priority_class=self.p.preemptible_class,
                                            annotations={kai_adapter.SKIP_PODGROUPER: "true"}))
        base.wait_for("the upgrade's running pods to be scheduled by KAI and running", self._all_running,
                      self.p.wait_seconds, interval=1.0)
        if self.plan.pending is not None:
            team, name, gpus = self.plan.pending
            self.ws.create(self._pod(team, name, gpus, False))
            base.wait_for(f"KAI to hold back pod {self.ns}/{name} ({gpus} GPUs, over queue {team.name}'s quota)",
                          self._pending_held, self.p.wait_seconds, interval=1.0)

    def _running(self, group: str, size: int) -> bool:
        up = [x for x in self.ws.group_pods(group) if x.spec.node_name and x.status and x.status.phase == "Running"
              and x.metadata.deletion_timestamp is None]
        return len(up) >= size

    def _all_running(self) -> bool:
        return all(self._running(name, size) for _, name, size in self.plan.groups)

    def _pending_held(self) -> bool:
        assert self.plan.pending is not None
        pods = self.ws.group_pods(self.plan.pending[1])
        return bool(pods) and not pods[0].spec.node_name and bool(kai_pods.unschedulable_reason(pods[0]))

    def pending_admitted(self) -> bool:
        return self.plan.pending is None or self._running(self.plan.pending[1], 1)

    def snapshot(self) -> tuple[upgrade_state.Snapshot, set[str]]:
        """The state, and the Queues running work stands in (its team and every queue above)."""
        snap = upgrade_state.take(self.kube, [self.ns], upgrade_state.KAI)
        parents = {k.split(" ", 1)[1]: str(spec.get("parentQueue") or "") for k, (_, spec) in snap.queues.items()}
        in_use: set[str] = set()
        for x in self.ws.pods(self.p.queue_label_key):
            if not x.spec.node_name or x.metadata.deletion_timestamp is not None:
                continue
            q = (x.metadata.labels or {}).get(self.p.queue_label_key, "")
            while q and upgrade_state.queue_key("Queue", q) not in in_use:
                in_use.add(upgrade_state.queue_key("Queue", q))
                q = parents.get(q, "")
        return snap, in_use

    def compare(self, before: tuple[upgrade_state.Snapshot, set[str]], after: tuple[upgrade_state.Snapshot, set[str]],
                to_objects: list[dict[str, Any]], from_objects: list[dict[str, Any]],
                ref: str) -> tuple[list[str], list[str]]:
        """(problems with running work, problems with Queues)."""
        problems = upgrade_state.compare(before[0], after[0], upgrade_state.rendered_queues(to_objects, upgrade_state.KAI),
                                         upgrade_state.rendered_queues(from_objects, upgrade_state.KAI), ref,
                                         in_use=before[1], users="running pods")
        queues = [p for p in problems if p.startswith("Queue ")]
        return [p for p in problems if p not in queues], queues

    def release_running(self) -> None:
        """Delete the running pods (after they were checked), so the pending one has room."""
        for _, name, _ in self.plan.groups:
            for x in self.ws.group_pods(name):
                try:
                    self.kube.core.delete_namespaced_pod(x.metadata.name, self.ns, grace_period_seconds=0)
                except ApiException as exc:
                    if exc.status != 404:
                        raise base.CaseFailed(f"delete pod {self.ns}/{x.metadata.name}: "
                                              f"{kube_client.http_error(exc)}") from exc

    def cleanup(self) -> None:
        self.ws.cleanup()


class KaiProber(upgrade_probe.ApiProber):
    """Probes as one-GPU pods in a Queue of their own (``upgrade-probe`` under
    ``upgrade-probe-root``, 4 GPUs, outside every department), bound by KAI."""

    def __init__(self, kubeconfig: Path, params: kai_params.Params, name: str = PROBES) -> None:
        super().__init__(kubeconfig)
        self.params, self.name = params, name  # the namespace and the leaf Queue
        self.queues: list[str] = []

    def _ws(self) -> kai_workspace.Workspace:
        return kai_workspace.Workspace(self.kube, self.params, self.name, queues=self.queues)

    def create_queue(self) -> None:
        kube = self.kube
        kube.call(f"create namespace {self.name}", kube.core.create_namespace,
                  {"metadata": {"name": self.name, "labels": {base.SUITE_LABEL: "upgrade"}}})
        kube_client.default_service_account(kube, self.name)
        ws = self._ws()
        ws.queue(self.name, parent=ws.queue(f"{self.name}-root", quota=4), quota=4)

    def submit(self, i: int) -> None:
        body = kai_pods.pod(self.params, f"probe-{i}", self.name, group=f"probe-{i}", gpus=1,
                            priority_class=self.params.preemptible_class)
        self.kube.core.create_namespaced_pod(self.name, body)

    def scheduled(self, i: int) -> bool:
        return any(x.spec.node_name for x in self.kube.core.list_namespaced_pod(
            self.name, label_selector=f"{base.SUITE_LABEL}=probe-{i}").items)

    def remove(self, i: int) -> None:
        self.kube.core.delete_namespaced_pod(f"probe-{i}", self.name, grace_period_seconds=0)

    def cleanup(self) -> None:
        self._ws().cleanup()
