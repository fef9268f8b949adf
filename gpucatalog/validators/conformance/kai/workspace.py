"""One KAI case's own corner of the cluster: a fresh namespace and the Queues it creates, with
the pods, PodGroups and BindRequests found there, all removed afterwards, pass or fail; cleanup
also waits until KAI released the shared GPUs (reservation pods) the case's pods used.

Called by the KAI suites (``fractional_gpu``, ``quota_reclaim``, ``gang``) through
``workspace(...)``. Talks only to the Kubernetes API.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kai import params as kai_params
from gpucatalog.validators.conformance.kit import base, kube_client


@dataclass
class Workspace:
    kube: kube_client.Kube
    p: kai_params.Params
    ns: str
    queues: list[str] = field(default_factory=list)
    # Reservation pods (shared GPUs) of this case KAI had not released when cleanup gave up.
    leaked: list[str] = field(default_factory=list)

    def queue(self, name: str, *, parent: str = "", quota: float = 0, weight: float = 1, limit: float = -1,
              priority: int | None = None) -> str:
        """Create a Queue (GPU governed; CPU and memory unlimited) owned by this workspace."""
        spec: dict[str, Any] = {"resources": {
            "gpu": {"quota": quota, "overQuotaWeight": weight, "limit": limit},
            "cpu": {"quota": -1, "overQuotaWeight": 1, "limit": -1},
            "memory": {"quota": -1, "overQuotaWeight": 1, "limit": -1}}}
        if parent:
            spec["parentQueue"] = parent
        if priority is not None:
            spec["priority"] = priority
        body = {"apiVersion": f"{kai_params.GROUP}/v2", "kind": "Queue",
                "metadata": {"name": name, "labels": {base.SUITE_LABEL: self.ns}}, "spec": spec}
        self.kube.call(f"create Queue {name}", self.kube.custom.create_cluster_custom_object,
                       kai_params.GROUP, "v2", "queues", body)
        self.queues.append(name)
        return name

    def leaf_queue(self, quota: float = 0) -> str:
        """A root Queue ``<ns>-root`` and under it the leaf ``<ns>-q`` pods go to, both with
        ``quota`` GPUs; returns the leaf's name."""
        root = self.queue(f"{self.ns}-root", quota=quota)
        return self.queue(f"{self.ns}-q", parent=root, quota=quota)

    def create(self, pod: dict[str, Any]) -> str:
        name = str(pod["metadata"]["name"])
        self.kube.call(f"create pod {self.ns}/{name}", self.kube.core.create_namespaced_pod, self.ns, pod)
        return name

    def pods(self, selector: str) -> list[Any]:
        return list(self.kube.call(f"list pods {selector}", self.kube.core.list_namespaced_pod, self.ns,
                                   label_selector=selector).items)

    def group_pods(self, group: str) -> list[Any]:
        """The pods a case submitted as ``group`` (``kai_pods.pod(..., group=...)``)."""
        return self.pods(f"{base.SUITE_LABEL}={group}")

    def pod_groups(self) -> list[dict[str, Any]]:
        """The namespace's PodGroups (explicit ones and those KAI's pod-grouper made)."""
        found = self.kube.call("list PodGroups", self.kube.custom.list_namespaced_custom_object,
                               kai_params.GROUP, "v2alpha2", self.ns, "podgroups")
        items: list[dict[str, Any]] = found.get("items", [])
        return items

    def bind_requests(self) -> list[dict[str, Any]]:
        """The namespace's BindRequests (KAI's scheduler asks its binder to bind a pod with one)."""
        found = self.kube.call("list BindRequests", self.kube.custom.list_namespaced_custom_object,
                               kai_params.GROUP, "v1alpha2", self.ns, "bindrequests")
        items: list[dict[str, Any]] = found.get("items", [])
        return items

    def delete_pod(self, name: str) -> None:
        self.kube.call(f"delete pod {name}", self.kube.core.delete_namespaced_pod, name, self.ns,
                       grace_period_seconds=0)

    def gpu_groups(self) -> set[str]:
        """KAI GPU groups (shared GPUs) the namespace's pods were put in."""
        try:
            pods = self.kube.core.list_namespaced_pod(self.ns, label_selector=kai_params.GPU_GROUP_LABEL).items
        except (ApiException, urllib3.exceptions.HTTPError):
            return set()
        return {str((q.metadata.labels or {})[kai_params.GPU_GROUP_LABEL]) for q in pods}

    def reservations_left(self, groups: set[str]) -> list[str]:
        """Reservation pods (KAI's binder holds a shared GPU with one) still there for ``groups``."""
        if not groups:
            return []
        try:
            pods = self.kube.core.list_namespaced_pod(self.p.reservation_namespace, label_selector=kai_params.GPU_GROUP_LABEL).items
        except (ApiException, urllib3.exceptions.HTTPError):
            return []
        return sorted(f"{q.metadata.name} (group {(q.metadata.labels or {})[kai_params.GPU_GROUP_LABEL]} on {q.spec.node_name})"
                      for q in pods if (q.metadata.labels or {}).get(kai_params.GPU_GROUP_LABEL) in groups)

    def cleanup(self) -> list[str]:
        """Delete the namespace and the queues (leaves first), and wait for KAI to release the
        shared GPUs the case used; return what could not be cleaned."""
        problems: list[str] = []
        groups = self.gpu_groups()
        # Jobs and pods first (grace 0), so GPUs are free for the next case at once instead of
        # whenever the namespace controller gets to them.
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("Jobs", lambda: self.kube.batch.delete_collection_namespaced_job(
                self.ns, propagation_policy="Background")),
            ("pods", lambda: self.kube.core.delete_collection_namespaced_pod(self.ns, grace_period_seconds=0)),
            ("namespace", lambda: self.kube.core.delete_namespace(
                self.ns, propagation_policy="Background", grace_period_seconds=0)),
        ]
        for what, step in steps:
            try:
                step()
            except ApiException as exc:
                problems.append(f"delete {what} of {self.ns}: {kube_client.http_error(exc)}")
            except urllib3.exceptions.HTTPError as exc:
                problems.append(f"delete {what} of {self.ns}: {exc}")
        deadline = time.monotonic() + self.p.wait_seconds
        while time.monotonic() < deadline:
            try:
                left = self.kube.core.list_namespaced_pod(self.ns).items
            except (ApiException, urllib3.exceptions.HTTPError):
                break
            if not left:
                break
            time.sleep(0.5)
        # KAI's binder deletes a shared GPU's reservation pod once its last fraction pod is gone;
        # until then the GPU is held, and the next case would find fewer free GPUs than it plans for.
        while time.monotonic() < deadline and self.reservations_left(groups):
            time.sleep(0.5)
        self.leaked = self.reservations_left(groups)
        if self.leaked:
            problems.append(f"reservation pods still hold GPUs after the case's pods were deleted: {', '.join(self.leaked)}")
        for name in reversed(self.queues):
            try:
                self.kube.custom.delete_cluster_custom_object(kai_params.GROUP, "v2", "queues", name)
            except ApiException as exc:
                if exc.status != 404:
                    problems.append(f"Queue {name}: {kube_client.http_error(exc)}")
            except urllib3.exceptions.HTTPError as exc:
                problems.append(f"Queue {name}: {exc}")
        return problems


@contextmanager
def workspace(kube: kube_client.Kube, p: kai_params.Params, suite: str, res: base.CaseResult) -> Iterator[Workspace]:
    """A fresh namespace for one case; queues and pods are removed afterwards, pass or fail."""
    ns = f"{p.namespace_prefix}-{suite}-{secrets.token_hex(3)}"
    kube.call(f"create namespace {ns}", kube.core.create_namespace,
              {"metadata": {"name": ns, "labels": {base.SUITE_LABEL: suite}}})
    ws = Workspace(kube, p, ns)
    try:
        kube_client.default_service_account(kube, ns)
        yield ws
    except BaseException:
        leftovers = ws.cleanup()
        if leftovers:
            res.details["cleanup_problems"] = leftovers
        raise
    leftovers = ws.cleanup()
    if leftovers:
        res.details["cleanup_problems"] = leftovers
    if ws.leaked:
        # A passing case that leaves shared GPUs held has leaked GPUs; say so instead of letting
        # the next case fail on free GPUs it cannot find.
        raise base.CaseFailed(f"KAI did not release {len(ws.leaked)} shared GPU(s) within "
                              f"{p.wait_seconds:.0f}s of the case's pods being deleted: {', '.join(ws.leaked)}")
