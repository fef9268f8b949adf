"""A stand-in for KAI's scheduler and binder on a bare API server, so tests can show what a KAI
suite case does when the cluster behaves one way or another (a scheduler that ignores gangs or
GPU memory, a binder that never releases a shared GPU …). Not a KAI model: each test hands it a
``decide`` policy, and it writes what KAI would write through the real API: a Binding, the
``runai-gpu-group`` label, a reservation pod holding the shared GPU, or a PodScheduled=False
condition with a reason. Also makes the KAI component Deployments and pods look ready.

Used by tests/validators/conformance/kai/test_cases_api.py and upgrade/test_kai_api.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kai import pods as kai_pods
from gpucatalog.validators.conformance.kit import kube_client

SCHEDULER = "kai-scheduler"
NAMESPACES = ("conformance-", "tenant-", "upgrade-")  # the suites' workspaces, other tenants, upgrade work


@dataclass(frozen=True)
class Bind:
    node: str
    group: str = ""  # put the pod on a shared GPU of this group (with a reservation pod)
    device: str = ""  # the GPU id the reservation pod reports


@dataclass(frozen=True)
class Reject:
    reason: str


Decision = Bind | Reject | None
Policy = Callable[[Any, list[Any]], Decision]  # (pending pod, all pods of kai-scheduler) -> decision


class FakeKai:
    def __init__(self, kube: kube_client.Kube, decide: Policy, *, reservation_ns: str,
                 release_after: float | None = 0.5, retry: bool = False) -> None:
        self.kube, self.decide, self.rr_ns = kube, decide, reservation_ns
        self.release_after = release_after  # None: never delete an unused reservation pod
        self.retry = retry  # decide again on a pod held back before (as KAI does every cycle)
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.unused_since: dict[str, float] = {}
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                self._step()
            except ApiException as exc:
                # 404/409: the pod went or changed under us; NamespaceTerminating: a test's cleanup
                # deleted the namespace while a pod was being placed (KAI drops such a bind too).
                if exc.status not in (404, 409) and "NamespaceTerminating" not in str(exc.body):
                    self.errors.append(f"{exc.status} {exc.reason}: {exc.body}")
            except Exception as exc:  # noqa: BLE001 - a test helper thread: keep going; the test asserts errors
                self.errors.append(repr(exc))
            time.sleep(0.2)

    def _step(self) -> None:
        pods = self.kube.core.list_pod_for_all_namespaces(field_selector=f"spec.schedulerName={SCHEDULER}").items
        pods = [p for p in pods if p.metadata.namespace.startswith(NAMESPACES)]
        for pod in pods:
            held = kai_pods.unschedulable_reason(pod)
            if pod.spec.node_name or pod.metadata.deletion_timestamp or (held and not self.retry):
                continue
            decision = self.decide(pod, pods)
            if isinstance(decision, Bind):
                self._bind(pod, decision)
                if self.retry:
                    pod.spec.node_name = decision.node  # later decisions of this pass see it placed
            elif isinstance(decision, Reject) and not held.endswith(decision.reason):
                self.kube.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": {
                    "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                    "message": decision.reason}]}})
        self._release(pods)

    def _bind(self, pod: Any, d: Bind) -> None:
        ns, name = pod.metadata.namespace, pod.metadata.name
        if d.group:
            self.kube.core.patch_namespaced_pod(name, ns, {"metadata": {"labels": {kai_pods.GPU_GROUP_LABEL: d.group}}})
            reservation = f"gpu-reservation-{d.node}-{d.group}"
            body = {"metadata": {"name": reservation, "labels": {kai_pods.GPU_GROUP_LABEL: d.group},
                                 "annotations": {kai_pods.RESERVED_GPU_ANNOTATION: d.device} if d.device else {}},
                    "spec": {"nodeName": d.node, "containers": [{
                        "name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
            try:
                self.kube.core.create_namespaced_pod(self.rr_ns, body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
        self.kube.core.create_namespaced_binding(ns, {"metadata": {"name": name},
                                                      "target": {"kind": "Node", "name": d.node}},
                                                 _preload_content=False)

    def _release(self, pods: list[Any]) -> None:
        """Delete a reservation pod ``release_after`` seconds after its group's last pod is gone."""
        if self.release_after is None:
            return
        used = {(p.metadata.labels or {}).get(kai_pods.GPU_GROUP_LABEL) for p in pods if p.metadata.deletion_timestamp is None}
        now = time.monotonic()
        for r in self.kube.core.list_namespaced_pod(self.rr_ns, label_selector=kai_pods.GPU_GROUP_LABEL).items:
            group = r.metadata.labels[kai_pods.GPU_GROUP_LABEL]
            if group in used:
                self.unused_since.pop(group, None)
                continue
            since = self.unused_since.setdefault(group, now)
            if now - since >= self.release_after:
                self.kube.core.delete_namespaced_pod(r.metadata.name, self.rr_ns, grace_period_seconds=0)


@contextmanager
def running(kube: kube_client.Kube, decide: Policy, *, reservation_ns: str,
            release_after: float | None = 0.5, retry: bool = False) -> Iterator[FakeKai]:
    fake = FakeKai(kube, decide, reservation_ns=reservation_ns, release_after=release_after, retry=retry)
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.stopping.set()
        fake.thread.join(timeout=5)
    assert not fake.errors, fake.errors[:3]


def namespace(kube: kube_client.Kube, ns: str) -> None:
    """Create ``ns`` with its default ServiceAccount (no controller-manager makes one here)."""
    try:
        kube.core.create_namespace({"metadata": {"name": ns}})
        kube.core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def components_ready(kube: kube_client.Kube, ns: str, apps: list[str]) -> None:
    """KAI component Deployments with one ready pod each (``<app>-0``), as the operator and a
    kubelet would leave them."""
    namespace(kube, ns)
    for app in apps:
        labels = {"app": app}
        kube.apps.create_namespaced_deployment(ns, {
            "metadata": {"name": app},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}})
        kube.apps.patch_namespaced_deployment_status(app, ns, {"status": {"replicas": 1, "readyReplicas": 1}})
        kube.core.create_namespaced_pod(ns, {"metadata": {"name": f"{app}-0", "labels": labels},
                                             "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
        pod_status(kube, ns, f"{app}-0", ready=True, restarts=0)


def pod_status(kube: kube_client.Kube, ns: str, name: str, *, ready: bool, restarts: int) -> None:
    state = {"running": {}} if ready else {"waiting": {"reason": "CrashLoopBackOff"}}
    kube.core.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Running", "containerStatuses": [{
        "name": "c", "image": "registry.k8s.io/pause:3.10", "imageID": "", "ready": ready,
        "restartCount": restarts, "state": state}]}})


def gpu_node(kube: kube_client.Kube, name: str, gpus: int, memory_mib: int = 81920) -> None:
    kube.core.create_node({"metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": str(memory_mib)}}})
    alloc = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    kube.core.patch_node_status(name, {"status": {"capacity": alloc, "allocatable": alloc}})
