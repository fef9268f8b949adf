"""One Kueue case's own corner of the cluster, as the queueing contract's ``Space``.

How Kueue expresses the contract: a department is a Cohort (nested through ``parentName``, with
the GPUs it guarantees beyond its children as its own quota), a team a ClusterQueue in its
department's cohort (nominal quota; a non-preemptible team never borrows; reclaim within the
cohort) with a LocalQueue in the case's namespace; a unit is a one-pod batch/v1 Job naming the
LocalQueue (label ``kueue.x-k8s.io/queue-name``); a gang is one Job of N pods (Kueue admits a
workload whole, and ``waitForPodsReady`` evicts one whose pods do not all start); "held back" is
a Workload without reserved quota and its condition message. Everything is removed afterwards.

Called by :mod:`.adapter`. Talks only to the Kubernetes API.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client
from gpucatalog.validators.conformance.queueing import contract as queueing_contract

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# On the sim, kwok ends a workload pod after this long (a scripted end; without it the pod runs
# until deleted, as the container would); other clusters ignore it.
RUN_FOR = "sim.gpu-catalog.dev/run-for"


@dataclass(frozen=True)
class KueueParams:
    kueue_namespace: str = "kueue-system"
    workload_image: str = "registry.k8s.io/pause:3.10"
    preemptible_class: str = "train"
    non_preemptible_class: str = "inference"
    wait_seconds: float = 120.0
    settle_seconds: float = 8.0
    run_for: str = "1h"
    namespace_prefix: str = "conformance"
    # How a test shows the contract failing on a misconfigured Kueue: a borrowing limit for every
    # preemptible team (0: a cohort without borrowing), and a spec deep-merged into every
    # ClusterQueue a case makes (e.g. {"preemption": {"reclaimWithinCohort": "Never"}}).
    borrowing_limit: int | None = None
    cluster_queue_overrides: dict[str, Any] = field(default_factory=dict)


def merge(base_: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base_)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class KueueSpace:
    partial_gangs = False  # a gang is one Job: Kueue admits its pods together or not at all

    def __init__(self, kube: kube_client.Kube, p: KueueParams, ns: str) -> None:
        self.kube, self.p, self.ns = kube, p, ns
        self.flavor = f"{ns}-gpu"
        self.cohorts: list[str] = []
        self.queues: list[str] = []
        self.flavors: list[str] = []

    # -- the tree ---------------------------------------------------------------------------------
    def _create(self, plural: str, body: dict[str, Any]) -> None:
        body = {"apiVersion": f"{GROUP}/{VERSION}", **body}
        body["metadata"] = {**body["metadata"], "labels": {base.SUITE_LABEL: self.ns}}
        self.kube.call(f"create {body['kind']} {body['metadata']['name']}",
                       self.kube.custom.create_cluster_custom_object, GROUP, VERSION, plural, body)

    def _quota(self, nominal: int, borrow: int | None = None) -> list[dict[str, Any]]:
        res: dict[str, Any] = {"name": gpu_inventory.GPU, "nominalQuota": nominal}
        if borrow is not None:
            res["borrowingLimit"] = borrow
        return [{"coveredResources": [gpu_inventory.GPU], "flavors": [{"name": self.flavor, "resources": [res]}]}]

    def build(self, root: queueing_contract.Dept) -> None:
        # no node labels: the case pins its pods to nodes itself
        self._create("resourceflavors", {"kind": "ResourceFlavor", "metadata": {"name": self.flavor}, "spec": {}})
        self.flavors.append(self.flavor)
        for node, parent in root.walk():
            name = f"{self.ns}-{node.name}"
            weight = {"weight": f"{node.weight:g}"}
            if isinstance(node, queueing_contract.Dept):
                spec: dict[str, Any] = {"fairSharing": weight}
                if parent is not None:
                    spec["parentName"] = f"{self.ns}-{parent.name}"
                own = node.quota - sum(c.quota for c in node.children)
                if own > 0:
                    spec["resourceGroups"] = self._quota(own)
                self._create("cohorts", {"kind": "Cohort", "metadata": {"name": name}, "spec": spec})
                self.cohorts.append(name)
                continue
            assert parent is not None  # teams always sit in a department
            spec = {
                "cohortName": f"{self.ns}-{parent.name}",
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.ns}},
                "queueingStrategy": "BestEffortFIFO",
                "resourceGroups": self._quota(node.quota, self.p.borrowing_limit if node.preemptible else 0),
                "preemption": {"reclaimWithinCohort": "Any",
                               "withinClusterQueue": "LowerPriority" if node.preemptible else "Never"},
                "fairSharing": weight,
            }
            self._create("clusterqueues", {"kind": "ClusterQueue", "metadata": {"name": name},
                                           "spec": merge(spec, self.p.cluster_queue_overrides)})
            self.queues.append(name)
            lq = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LocalQueue",
                  "metadata": {"name": node.name, "namespace": self.ns}, "spec": {"clusterQueue": name}}
            self.kube.call(f"create LocalQueue {node.name}", self.kube.custom.create_namespaced_custom_object,
                           GROUP, VERSION, self.ns, "localqueues", lq)
        base.wait_for("Kueue to activate the case's ClusterQueues", self._all_active, self.p.wait_seconds)

    def _all_active(self) -> bool:
        for name in self.queues:
            cq = self.kube.call(f"read ClusterQueue {name}", self.kube.custom.get_cluster_custom_object,
                                GROUP, VERSION, "clusterqueues", name)
            conds = {c.get("type"): c.get("status") for c in (cq.get("status") or {}).get("conditions") or []}
            if conds.get("Active") != "True":
                return False
        return True

    # -- workloads --------------------------------------------------------------------------------
    def _job(self, team: str, name: str, group: str, size: int, nodes: list[str], preemptible: bool) -> None:
        pod: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "priorityClassName": self.p.preemptible_class if preemptible else self.p.non_preemptible_class,
            "tolerations": [{"key": gpu_inventory.GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": self.p.workload_image, "resources": {
                "requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {gpu_inventory.GPU: "1"}}}],
        }
        if nodes:  # one term per node (terms are ORed): a node-name field selector takes one value
            pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]} for n in nodes]}}}
        body = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "labels": {QUEUE_LABEL: team, base.SUITE_LABEL: group}},
                "spec": {"parallelism": size, "completions": size, "backoffLimit": 0, "suspend": True,
                         "template": {"metadata": {"labels": {base.SUITE_LABEL: group},
                                                   "annotations": {RUN_FOR: self.p.run_for}},
                                      "spec": pod}}}
        self.kube.call(f"create Job {name}", self.kube.batch.create_namespaced_job, self.ns, body)

    def submit(self, team: str, group: str, count: int, nodes: list[str], *, start: int = 0,
               preemptible: bool = True) -> None:
        for i in range(start, start + count):
            self._job(team, f"{group}-{i}", group, 1, nodes, preemptible)

    def gang(self, team: str, group: str, size: int, node: str, members: int | None = None) -> None:
        if members is not None and members != size:
            raise base.CaseFailed(f"a Kueue gang is one Job of all {size} pods; it cannot exist with {members}")
        self._job(team, group, group, size, [node] if node else [], True)

    def gang_member(self, team: str, group: str, size: int, node: str, i: int) -> None:
        raise base.CaseFailed("a Kueue gang is one Job: members cannot be added one by one")

    def job(self, team: str, group: str, size: int, node: str) -> None:
        self.gang(team, group, size, node)

    # -- reading Kueue's answer ---------------------------------------------------------------------
    def jobs(self, group: str) -> list[Any]:
        found = self.kube.call(f"list Jobs of {group}", self.kube.batch.list_namespaced_job, self.ns,
                               label_selector=f"{base.SUITE_LABEL}={group}").items
        return [j for j in found if j.metadata.deletion_timestamp is None]

    def pods(self, group: str) -> list[Any]:
        return list(self.kube.call(f"list pods of {group}", self.kube.core.list_namespaced_pod, self.ns,
                                   label_selector=f"{base.SUITE_LABEL}={group}").items)

    def workloads(self, group: str) -> list[dict[str, Any]]:
        """Kueue's Workloads of the group's Jobs (found through their owner references)."""
        names = {j.metadata.name for j in self.jobs(group)}
        found = self.kube.call("list Workloads", self.kube.custom.list_namespaced_custom_object,
                               GROUP, VERSION, self.ns, "workloads")
        return [w for w in found.get("items", [])
                if any(o.get("kind") == "Job" and o.get("name") in names for o in w["metadata"].get("ownerReferences") or [])]

    def scheduled(self, group: str) -> list[Any]:
        return [x for x in self.pods(group) if x.spec.node_name and x.metadata.deletion_timestamp is None]

    def held_back(self, group: str) -> list[str]:
        reasons = []
        for w in self.workloads(group):
            conds = {c.get("type"): c for c in (w.get("status") or {}).get("conditions") or []}
            reserved = conds.get("QuotaReserved") or {}
            admitted = (conds.get("Admitted") or {}).get("status") == "True"
            if reserved.get("status") == "False" and not admitted:
                reasons.append(f"{reserved.get('reason')}: {reserved.get('message', '')}".strip())
        return reasons

    def started(self, group: str) -> list[str]:
        signs = [f"Job {j.metadata.name} unsuspended" for j in self.jobs(group) if not j.spec.suspend]
        return signs + [f"pod {x.metadata.name}" + (f" on {x.spec.node_name}" if x.spec.node_name else " created")
                        for x in self.pods(group)]

    def remove(self, group: str, *, only_pending: bool = False, one: bool = False) -> None:
        jobs = self.jobs(group)
        if only_pending:  # preempted Jobs wait suspended for a second admission
            jobs = [j for j in jobs if j.spec.suspend]
        for j in jobs[:1] if one else jobs:
            self._delete_job(j.metadata.name)

    def _delete_job(self, name: str) -> None:
        try:
            self.kube.batch.delete_namespaced_job(name, self.ns, propagation_policy="Background")
            self.kube.core.delete_collection_namespaced_pod(self.ns, label_selector=f"job-name={name}",
                                                            grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise base.CaseFailed(f"delete Job {self.ns}/{name}: {kube_client.http_error(exc)}") from exc

    def units(self, group: str) -> int:
        return len(self.jobs(group))

    def gang_unit(self, group: str) -> dict[str, Any] | None:
        for w in self.workloads(group):
            conds = {c.get("type"): c.get("status") for c in (w.get("status") or {}).get("conditions") or []}
            if conds.get("Admitted") == "True":
                members = sum(int(ps.get("count", 0)) for ps in w["spec"].get("podSets") or [])
                return {"kind": "Workload", "name": w["metadata"]["name"], "members": members}
        return None

    def extras(self, case: str) -> dict[str, Any]:
        return {}

    # -- cleanup ----------------------------------------------------------------------------------
    def cleanup(self) -> list[str]:
        """Delete the namespace's Jobs and pods, the namespace, then the queues, cohorts and flavor."""
        problems: list[str] = []
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("Jobs", lambda: self.kube.batch.delete_collection_namespaced_job(self.ns, propagation_policy="Background")),
            ("pods", lambda: self.kube.core.delete_collection_namespaced_pod(self.ns, grace_period_seconds=0)),
            ("namespace", lambda: self.kube.core.delete_namespace(self.ns, propagation_policy="Background")),
        ]
        for plural, names in (("clusterqueues", self.queues), ("cohorts", self.cohorts[::-1]),
                              ("resourceflavors", self.flavors)):
            steps += [(f"{plural}/{name}", self._deleter(plural, name)) for name in names]
        for what, step in steps:
            try:
                step()
            except ApiException as exc:
                if exc.status != 404:
                    problems.append(f"delete {what} of {self.ns}: {kube_client.http_error(exc)}")
            except urllib3.exceptions.HTTPError as exc:
                problems.append(f"delete {what} of {self.ns}: {exc}")
            if what == "namespace":
                self._wait_pods_gone()
        return problems

    def _deleter(self, plural: str, name: str) -> Callable[[], Any]:
        return lambda: self.kube.custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)

    def _wait_pods_gone(self) -> None:
        deadline = time.monotonic() + self.p.wait_seconds
        while time.monotonic() < deadline:
            try:
                if not self.kube.core.list_namespaced_pod(self.ns).items:
                    return
            except (ApiException, urllib3.exceptions.HTTPError):
                return
            time.sleep(0.5)
