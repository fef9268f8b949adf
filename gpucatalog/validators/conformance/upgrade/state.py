"""What an upgrade must not lose, read from the Kubernetes API before and after it.

A ``Snapshot`` holds the running workload pods (UID, node, restart count), Kueue's Workloads
(UID, admission, evictions) and every queue object a user owns (Kueue ResourceFlavors, Cohorts,
ClusterQueues, LocalQueues, or KAI's Queues: UID and spec; :data:`KUEUE`, :data:`KAI`). ``compare`` names every difference an upgrade may not
make: a running pod gone, replaced, moved or restarted; an admitted Workload evicted, requeued or
no longer admitted; a queue object deleted, recreated, or whose spec is neither what it was nor
what the new version renders for it.

Called by the upgrade pipeline (``pipelines.upgrade``) through ``upgrade.kueue`` and
``upgrade.kai``. Talks only to the Kubernetes API.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from gpucatalog.validators.conformance.kit import base, kube_client
from gpucatalog.validators.conformance.kueue import space as kueue_space

QUEUE_KINDS = {"ResourceFlavor": "resourceflavors", "Cohort": "cohorts", "ClusterQueue": "clusterqueues",
               "LocalQueue": "localqueues"}


@dataclass(frozen=True)
class QueueApi:
    """A scheduler's queue objects: API group and version, kind -> plural; whether it has Workloads."""

    group: str
    version: str
    kinds: Mapping[str, str]
    workloads: bool


KUEUE = QueueApi(kueue_space.GROUP, kueue_space.VERSION, QUEUE_KINDS, workloads=True)
KAI = QueueApi("scheduling.run.ai", "v2", {"Queue": "queues"}, workloads=False)


def team_preemptible(labels: Mapping[str, str]) -> bool | None:
    """For a queue object's labels (team-queues' chart sets them for Kueue and KAI alike): None
    when it is not a team's queue, else whether the team's work is preemptible by default."""
    if labels.get("gpu-catalog.dev/queue-role") != "team":
        return None
    return labels.get("gpu-catalog.dev/default-preemptibility") != "non-preemptible"


class _Team(Protocol):
    @property
    def quota(self) -> int: ...
    @property
    def preemptible(self) -> bool: ...


TeamT = TypeVar("TeamT", bound=_Team)


def work_teams(teams: Sequence[TeamT], what: str = "teams") -> tuple[list[TeamT], list[TeamT]]:
    """The teams with 2 or more GPUs an upgrade's workload set runs in: (preemptible,
    non-preemptible); CaseFailed unless there are 2 and 1 (``what`` names the teams)."""
    pre = [t for t in teams if t.preemptible and t.quota >= 2]
    non = [t for t in teams if not t.preemptible and t.quota >= 2]
    if len(pre) < 2 or not non:
        raise base.CaseFailed(f"the old version renders {len(pre)} preemptible and {len(non)} non-preemptible {what} "
                              "with 2 or more GPUs; the upgrade's workload set needs 2 and 1")
    return pre, non


@dataclass(frozen=True)
class PodState:
    uid: str
    node: str
    restarts: int
    phase: str


@dataclass(frozen=True)
class WorkloadState:
    uid: str
    admitted: bool
    cluster_queue: str
    local_queue: str  # "ns/name"
    evictions: int  # Evicted conditions seen, plus requeueState.count


@dataclass
class Snapshot:
    pods: dict[str, PodState] = field(default_factory=dict)  # "ns/name"
    workloads: dict[str, WorkloadState] = field(default_factory=dict)  # "ns/name"
    queues: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # "Kind ns/name" -> (uid, spec)
    # queue objects being deleted (a finalizer such as Kueue's resource-in-use holds them)
    deleting: set[str] = field(default_factory=set)


def queue_key(kind: str, name: str, namespace: str = "") -> str:
    return f"{kind} {namespace + '/' if namespace else ''}{name}"


def _workload_state(w: dict[str, Any]) -> WorkloadState:
    st = w.get("status") or {}
    conds = {c.get("type"): c for c in st.get("conditions") or []}
    evicted = 1 if (conds.get("Evicted") or {}).get("status") == "True" else 0
    requeued = int((st.get("requeueState") or {}).get("count") or 0)
    return WorkloadState(
        uid=str(w["metadata"]["uid"]),
        admitted=(conds.get("Admitted") or {}).get("status") == "True",
        cluster_queue=str((st.get("admission") or {}).get("clusterQueue") or ""),
        local_queue=f"{w['metadata'].get('namespace', '')}/{(w.get('spec') or {}).get('queueName', '')}",
        evictions=evicted + requeued,
    )


def take(kube: kube_client.Kube, namespaces: list[str], api: QueueApi = KUEUE) -> Snapshot:
    """Pods (and Kueue's Workloads) of ``namespaces`` (the workload set's), and every queue object."""
    snap = Snapshot()
    for ns in namespaces:
        for pod in kube.call(f"list pods of {ns}", kube.core.list_namespaced_pod, ns).items:
            if pod.metadata.deletion_timestamp is not None or not pod.spec.node_name:
                continue
            st = (pod.status.container_statuses or []) if pod.status else []
            snap.pods[f"{ns}/{pod.metadata.name}"] = PodState(
                uid=str(pod.metadata.uid), node=str(pod.spec.node_name),
                restarts=sum(c.restart_count for c in st), phase=str(pod.status.phase if pod.status else ""))
        if api.workloads:
            found = kube.call(f"list Workloads of {ns}", kube.custom.list_namespaced_custom_object,
                              kueue_space.GROUP, kueue_space.VERSION, ns, "workloads")
            for w in found.get("items", []):
                snap.workloads[f"{ns}/{w['metadata']['name']}"] = _workload_state(w)
    for kind, plural in api.kinds.items():
        found = kube.call(f"list {plural}", kube.custom.list_cluster_custom_object, api.group, api.version, plural)
        for o in found.get("items", []):
            md = o["metadata"]
            k = queue_key(kind, md["name"], md.get("namespace", ""))
            snap.queues[k] = (str(md["uid"]), o.get("spec") or {})
            if md.get("deletionTimestamp"):
                snap.deleting.add(k)
    return snap


def contains(live: Any, want: Any) -> bool:
    """``want`` (a rendered spec) is in ``live`` (the server's, with defaults filled in)."""
    if isinstance(want, Mapping):
        return isinstance(live, Mapping) and all(k in live and contains(live[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(live, list) and len(live) == len(want) and all(contains(a, b) for a, b in zip(live, want, strict=True))
    if isinstance(want, (int, float)) and not isinstance(want, bool) and isinstance(live, str):
        return live == str(want)  # quantities come back as strings
    return bool(live == want)


def rendered_queues(objects: list[dict[str, Any]], api: QueueApi = KUEUE) -> dict[str, dict[str, Any]]:
    """"Kind ns/name" -> spec of every queue object in a version's rendering."""
    out: dict[str, dict[str, Any]] = {}
    for o in objects:
        if o.get("kind") in api.kinds and str(o.get("apiVersion", "")).startswith(api.group + "/"):
            md = o.get("metadata") or {}
            out[queue_key(o["kind"], md.get("name", ""), md.get("namespace", ""))] = o.get("spec") or {}
    return out


def held(before: Snapshot) -> set[str]:
    """Queue objects that admitted Workloads stand in: their ClusterQueue and LocalQueue, and
    the ClusterQueue's cohort with every cohort above it."""
    out: set[str] = set()
    for w in before.workloads.values():
        if w.admitted:
            cq = queue_key("ClusterQueue", w.cluster_queue)
            out.add(cq)
            ns, _, name = w.local_queue.partition("/")
            out.add(queue_key("LocalQueue", name, ns))
            cohort = str((before.queues.get(cq) or ("", {}))[1].get("cohortName") or "")
            while cohort and queue_key("Cohort", cohort) not in out:
                out.add(queue_key("Cohort", cohort))
                cohort = str((before.queues.get(queue_key("Cohort", cohort)) or ("", {}))[1].get("parentName") or "")
    return out


def compare(before: Snapshot, after: Snapshot, target: Mapping[str, dict[str, Any]],
            previous: Mapping[str, dict[str, Any]], version: str, in_use: set[str] | None = None,
            users: str = "admitted Workloads") -> list[str]:
    """Every way ``after`` lost what ``before`` had. ``target`` is what ``version`` renders,
    ``previous`` what the release before it rendered: an object only the previous release
    rendered may go with it, unless work stands in it (``in_use``, ``users`` saying what work:
    by default the queue objects of admitted Workloads, :func:`held`); any other object must stay."""
    problems: list[str] = []
    in_use = held(before) if in_use is None else in_use
    for key, was in sorted(before.pods.items()):
        now = after.pods.get(key)
        if now is None:
            problems.append(f"running pod {key} is gone after the upgrade to {version} (evicted or deleted)")
        elif now.uid != was.uid:
            problems.append(f"pod {key} was replaced (uid {was.uid[:8]} -> {now.uid[:8]})")
        elif now.node != was.node:
            problems.append(f"pod {key} moved from {was.node} to {now.node}")
        elif now.restarts > was.restarts:
            problems.append(f"pod {key} restarted ({was.restarts} -> {now.restarts})")
        elif now.phase != was.phase:
            problems.append(f"pod {key} went from {was.phase} to {now.phase}")
    for key, was_w in sorted(before.workloads.items()):
        if not was_w.admitted:
            continue
        now_w = after.workloads.get(key)
        if now_w is None:
            problems.append(f"admitted Workload {key} is gone after the upgrade to {version}")
        elif now_w.uid != was_w.uid:
            problems.append(f"Workload {key} was recreated (its Job was requeued)")
        elif not now_w.admitted:
            problems.append(f"Workload {key} is no longer admitted (was admitted to ClusterQueue {was_w.cluster_queue})")
        elif now_w.evictions > was_w.evictions:
            problems.append(f"Workload {key} was evicted or requeued during the upgrade")
    for key, (uid, spec) in sorted(before.queues.items()):
        now_q = after.queues.get(key)
        if now_q is None:
            if key in previous and key not in target and key not in in_use:
                continue  # the release dropped an object nothing stood in
            why = "not in its rendering" if key not in target else "deleted"
            stood = f" while {users} stood in it" if key in in_use else ""
            problems.append(f"{key} did not survive the upgrade to {version} ({why}){stood}; its spec was {spec}")
            continue
        if key in after.deleting and key not in before.deleting:
            stand = f"; {users} stand in it, so a finalizer holds it" if key in in_use else ""
            problems.append(f"{key} is being deleted by the upgrade to {version}{stand}")
            continue
        if now_q[0] != uid:
            problems.append(f"{key} was deleted and recreated (uid {uid[:8]} -> {now_q[0][:8]})")
        want = target.get(key)
        if want is not None and not contains(now_q[1], want):
            problems.append(f"{key} spec is not what {version} renders: has {now_q[1]}, renders {want}")
        if want is None and now_q[1] != spec:
            problems.append(f"{key} (not {version}'s own) changed spec: {spec} -> {now_q[1]}")
    return problems
