"""What the KAI conformance suites share on the cluster side: a Kubernetes client built from the
suite's kubeconfig only, the preflight that fails fast (naming what is missing) when KAI is not
running, a watchdog that fails a wait as soon as a KAI component crashes, a per-suite namespace
and queues that are always cleaned up, and builders for the pods KAI schedules.

Called by ``fractional_gpu``, ``quota_reclaim`` and ``gang``. Talks only to the Kubernetes API.

Suite parameters (``ctx.params``, all optional): ``kai_namespace`` (kai-scheduler),
``scheduler_name`` (kai-scheduler), ``queue_label_key`` (kai.scheduler/queue),
``reservation_namespace`` (kai-resource-reservation), ``workload_image`` (the pause image),
``preemptible_class`` (train), ``non_preemptible_class`` (inference), ``wait_seconds`` (120,
one wait, times ``ctx.timeout_scale``), ``settle_seconds`` (8: how long "stays pending" is watched).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpucatalog.catalog import readiness
from gpucatalog.core import kubeapi
from gpucatalog.validators.conformance import base, kai_math

T = TypeVar("T")

GPU = "nvidia.com/gpu"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
GROUP = "scheduling.run.ai"
FRACTION_ANNOTATION = "gpu-fraction"
MEMORY_ANNOTATION = "gpu-memory"
POD_GROUP_ANNOTATION = "pod-group-name"
GPU_GROUP_LABEL = "runai-gpu-group"
RESERVED_GPU_ANNOTATION = "run.ai/reserve_for_gpu_index"
SUITE_LABEL = "gpu-catalog.dev/conformance"

# KAI component -> the Deployment KAI's operator creates for it (its pods carry app=<name>).
DEPLOYMENTS = {
    "operator": "kai-operator",
    "scheduler": "kai-scheduler-default",
    "binder": "binder",
    "pod-grouper": "pod-grouper",
    "admission": "admission",
    "podgroup-controller": "podgroup-controller",
    "queue-controller": "queue-controller",
}


@dataclass(frozen=True)
class Params:
    kai_namespace: str = "kai-scheduler"
    scheduler_name: str = "kai-scheduler"
    queue_label_key: str = "kai.scheduler/queue"
    reservation_namespace: str = "kai-resource-reservation"
    workload_image: str = "registry.k8s.io/pause:3.10"
    preemptible_class: str = "train"
    non_preemptible_class: str = "inference"
    wait_seconds: float = 120.0
    settle_seconds: float = 8.0
    namespace_prefix: str = "conformance"

    @classmethod
    def from_ctx(cls, ctx: base.SuiteContext) -> Params:
        known = {k: v for k, v in ctx.params.items() if k in cls.__dataclass_fields__}
        p = cls(**known)
        scale = ctx.timeout_scale
        return cls(**{**p.__dict__, "wait_seconds": p.wait_seconds * scale,
                      "settle_seconds": p.settle_seconds * scale, "namespace_prefix": ctx.namespace_prefix})


class Kube:
    """Typed-enough access to the APIs the suites use; every API error becomes ``CaseFailed``."""

    def __init__(self, kubeconfig: str) -> None:
        # Typed as Any: the client's generated models are loosely typed (Optional everywhere),
        # and the suites read them defensively anyway.
        self.api: Any = kubeapi.client_for(kubeconfig)
        self.core: Any = client.CoreV1Api(self.api)
        self.apps: Any = client.AppsV1Api(self.api)
        self.batch: Any = client.BatchV1Api(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)
        self.scheduling: Any = client.SchedulingV1Api(self.api)

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise base.CaseFailed(f"{what}: HTTP {exc.status} {api_message(exc)}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise base.CaseFailed(f"{what}: Kubernetes API unreachable ({exc})") from exc

    def exists(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        try:
            fn(*args, **kwargs)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise base.CaseFailed(f"{what}: HTTP {exc.status} {api_message(exc)}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise base.CaseFailed(f"{what}: Kubernetes API unreachable ({exc})") from exc
        return True

    def close(self) -> None:
        self.api.close()


def api_message(exc: ApiException) -> str:
    """The API server's own message (e.g. an admission webhook's refusal), else the reason."""
    body = exc.body
    if isinstance(body, bytes | str) and body:
        try:
            return str(json.loads(body).get("message") or exc.reason)
        except ValueError:
            return str(body)[:300]
    return str(exc.reason)


# -- preflight --------------------------------------------------------------------------------


def preflight(kube: Kube, p: Params, components: list[str], *, min_gpus: int = 1,
              priority_classes: tuple[str, ...] = ()) -> dict[str, Any]:
    """Fail at once, naming every missing piece, unless KAI and enough GPUs are there."""
    problems: list[str] = []
    if not kube.exists("list KAI queues", kube.custom.list_cluster_custom_object, GROUP, "v2", "queues", limit=1):
        problems.append(f"CRD queues.{GROUP}/v2 is not installed")
    problems.extend(kai_config_problems(kube))
    for comp in components:
        name = DEPLOYMENTS[comp]
        problem = _deployment_problem(kube, p.kai_namespace, name)
        if problem:
            problems.append(f"KAI {comp}: {problem}")
    for pc in priority_classes:
        if not kube.exists(f"read PriorityClass {pc}", kube.scheduling.read_priority_class, pc):
            problems.append(f"PriorityClass {pc} does not exist (installed by team-queues)")
    capacity = gpu_capacity(kube)
    total = sum(capacity.values())
    if total < min_gpus:
        problems.append(f"the cluster has {total} allocatable {GPU} on schedulable nodes; the suite needs {min_gpus}")
    if problems:
        raise base.CaseFailed("KAI is not ready: " + "; ".join(problems))
    return {"gpu_nodes": len(capacity), "gpus": total}


def kai_config_problems(kube: Kube) -> list[str]:
    """KAI's own readiness report on its ``kai-config`` Config (shared with ``catalog install``)."""
    try:
        return readiness.kai_config_problems(kube.api)
    except urllib3.exceptions.HTTPError as exc:
        raise base.CaseFailed(f"read Config kai-config: Kubernetes API unreachable ({exc})") from exc


def _deployment_problem(kube: Kube, ns: str, name: str) -> str:
    try:
        dep = kube.apps.read_namespaced_deployment(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return f"Deployment {ns}/{name} does not exist"
        return f"Deployment {ns}/{name}: HTTP {exc.status} {api_message(exc)}"
    except urllib3.exceptions.HTTPError as exc:
        raise base.CaseFailed(f"read Deployment {ns}/{name}: Kubernetes API unreachable ({exc})") from exc
    want = dep.spec.replicas or 1
    ready = (dep.status.ready_replicas if dep.status else 0) or 0
    if ready >= 1:
        return ""
    why = _pod_trouble(kube, ns, name)
    return f"Deployment {ns}/{name} has {ready}/{want} ready replicas" + (f" ({why})" if why else "")


def _pod_trouble(kube: Kube, ns: str, app: str) -> str:
    pods = kube.call(f"list pods app={app}", kube.core.list_namespaced_pod, ns, label_selector=f"app={app}").items
    notes = []
    for pod in pods:
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            state = cs.state.waiting.reason if cs.state and cs.state.waiting else ""
            if state or cs.restart_count:
                notes.append(f"pod {pod.metadata.name}: {state or 'restarting'}, {cs.restart_count} restarts")
    return "; ".join(notes) if pods else "no pods"


def gpu_capacity(kube: Kube) -> dict[str, int]:
    """Allocatable whole GPUs per schedulable node."""
    out: dict[str, int] = {}
    for node in kube.call("list nodes", kube.core.list_node).items:
        if node.spec and node.spec.unschedulable:
            continue
        gpus = int(str((node.status.allocatable or {}).get(GPU, "0")))
        if gpus > 0:
            out[node.metadata.name] = gpus
    return out


def free_gpus(kube: Kube) -> dict[str, int]:
    """Whole GPUs per node not requested by any pod bound there that is still running."""
    free = gpu_capacity(kube)
    for pod_obj in kube.call("list pods", kube.core.list_pod_for_all_namespaces).items:
        node = pod_obj.spec.node_name
        if node not in free or (pod_obj.status and pod_obj.status.phase in ("Succeeded", "Failed")):
            continue
        for c in pod_obj.spec.containers:
            limits = (c.resources.limits or {}) if c.resources else {}
            free[node] -= int(str(limits.get(GPU, "0")))
    return {n: max(0, v) for n, v in free.items()}


def gpu_memory_mib(kube: Kube) -> dict[str, int]:
    """Per-GPU memory (MiB) of each GPU node from its ``nvidia.com/gpu.memory`` label."""
    out: dict[str, int] = {}
    for node in kube.call("list nodes", kube.core.list_node).items:
        value = (node.metadata.labels or {}).get(GPU_MEMORY_LABEL)
        if value and value.isdigit():
            out[node.metadata.name] = int(value)
    return out


# -- crash watchdog ----------------------------------------------------------------------------


class Watchdog:
    """Turns a crash of a KAI component during a wait into that case's failure reason."""

    def __init__(self, kube: Kube, p: Params, components: list[str]) -> None:
        self.kube, self.ns = kube, p.kai_namespace
        self.apps = [DEPLOYMENTS[c] for c in components]
        self.baseline = self._restarts()
        self._last = 0.0

    def _restarts(self) -> dict[str, int]:
        selector = f"app in ({','.join(self.apps)})"
        pods = self.kube.call("list KAI pods", self.kube.core.list_namespaced_pod, self.ns,
                              label_selector=selector).items
        out: dict[str, int] = {}
        for pod in pods:
            statuses = (pod.status.container_statuses or []) if pod.status else []
            out[pod.metadata.name] = sum(cs.restart_count for cs in statuses)
            out[f"{pod.metadata.name}#ready"] = int(all(cs.ready for cs in statuses) and bool(statuses))
        return out

    def check(self) -> None:
        now = time.monotonic()
        if now - self._last < 2.0:
            return
        self._last = now
        current = self._restarts()
        for name, value in current.items():
            if name.endswith("#ready"):
                continue
            before = self.baseline.get(name, 0)
            if value > before:
                raise base.CaseFailed(f"KAI pod {self.ns}/{name} restarted during the case ({before} -> {value} restarts)")
        for app in self.apps:
            pods = [n for n in current if n.startswith(app + "-") and not n.endswith("#ready")]
            if not any(current.get(f"{n}#ready") for n in pods):
                raise base.CaseFailed(f"KAI Deployment {self.ns}/{app} has no ready pod during the case")


def wait(dog: Watchdog, what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """``base.wait_for`` that also fails fast when a KAI component crashes meanwhile."""

    def guarded() -> T | None:
        dog.check()
        return probe()

    return base.wait_for(what, guarded, timeout, interval=0.5)


def stays(dog: Watchdog, what: str, probe: Callable[[], bool], seconds: float) -> None:
    """Check that ``probe`` holds for ``seconds`` (e.g. pods stay pending); fail naming ``what``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        dog.check()
        if not probe():
            raise base.CaseFailed(f"expected {what} for {seconds:.0f}s, but it changed")
        time.sleep(0.5)


# -- workspace: a namespace and queues, always cleaned up ------------------------------------


@dataclass
class Workspace:
    kube: Kube
    p: Params
    ns: str
    queues: list[str] = field(default_factory=list)

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
        body = {"apiVersion": f"{GROUP}/v2", "kind": "Queue",
                "metadata": {"name": name, "labels": {SUITE_LABEL: self.ns}}, "spec": spec}
        self.kube.call(f"create Queue {name}", self.kube.custom.create_cluster_custom_object,
                       GROUP, "v2", "queues", body)
        self.queues.append(name)
        return name

    def create(self, pod: dict[str, Any]) -> str:
        name = str(pod["metadata"]["name"])
        self.kube.call(f"create pod {self.ns}/{name}", self.kube.core.create_namespaced_pod, self.ns, pod)
        return name

    def pods(self, selector: str) -> list[Any]:
        return list(self.kube.call(f"list pods {selector}", self.kube.core.list_namespaced_pod, self.ns,
                                   label_selector=selector).items)

    def delete_pod(self, name: str) -> None:
        self.kube.call(f"delete pod {name}", self.kube.core.delete_namespaced_pod, name, self.ns,
                       grace_period_seconds=0)

    def cleanup(self) -> list[str]:
        """Delete the namespace and the queues (leaves first); return what could not be cleaned."""
        problems: list[str] = []
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
                problems.append(f"delete {what} of {self.ns}: HTTP {exc.status} {api_message(exc)}")
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
        for name in reversed(self.queues):
            try:
                self.kube.custom.delete_cluster_custom_object(GROUP, "v2", "queues", name)
            except ApiException as exc:
                if exc.status != 404:
                    problems.append(f"Queue {name}: HTTP {exc.status} {api_message(exc)}")
            except urllib3.exceptions.HTTPError as exc:
                problems.append(f"Queue {name}: {exc}")
        return problems


@contextmanager
def workspace(kube: Kube, p: Params, suite: str, res: base.CaseResult) -> Iterator[Workspace]:
    """A fresh namespace for one case; queues and pods are removed afterwards, pass or fail."""
    ns = f"{p.namespace_prefix}-{suite}-{secrets.token_hex(3)}"
    kube.call(f"create namespace {ns}", kube.core.create_namespace,
              {"metadata": {"name": ns, "labels": {SUITE_LABEL: suite}}})
    ws = Workspace(kube, p, ns)
    try:
        _default_service_account(kube, ns)
        yield ws
    finally:
        leftovers = ws.cleanup()
        if leftovers:
            res.details["cleanup_problems"] = leftovers


def _default_service_account(kube: Kube, ns: str) -> None:
    """Pods are refused until the namespace's ``default`` ServiceAccount exists; the
    controller-manager makes it within moments, and where none runs the suite makes it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if kube.exists("read ServiceAccount default", kube.core.read_namespaced_service_account, "default", ns):
            return
        time.sleep(0.2)
    try:
        kube.core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    except ApiException as exc:
        if exc.status != 409:
            raise base.CaseFailed(f"create ServiceAccount {ns}/default: HTTP {exc.status} {api_message(exc)}") from exc


# -- pods ---------------------------------------------------------------------------------------


def pod(p: Params, name: str, queue: str, *, group: str, gpus: int = 0, fraction: float | None = None,
        gpu_memory: int | None = None, priority_class: str | None = None, pod_group: str | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod for KAI: its scheduler, queue label, GPU request (whole, fraction or memory)."""
    ann = dict(annotations or {})
    if fraction is not None:
        ann[FRACTION_ANNOTATION] = f"{fraction:g}"
    if gpu_memory is not None:
        ann[MEMORY_ANNOTATION] = str(gpu_memory)
    if pod_group:
        ann[POD_GROUP_ANNOTATION] = pod_group
    container: dict[str, Any] = {"name": "main", "image": p.workload_image,
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
    if gpus:
        container["resources"]["limits"] = {GPU: str(gpus)}
    spec: dict[str, Any] = {
        "schedulerName": p.scheduler_name,
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [container],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {p.queue_label_key: queue, SUITE_LABEL: group},
                         "annotations": ann},
            "spec": spec}


def pin(body: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """Restrict a pod to ``nodes`` by name (node affinity on metadata.name; needs no labels)."""
    body["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": nodes}]}]}}}
    return body


def condition(pod_obj: Any, kind: str) -> Any:
    for cond in (pod_obj.status.conditions or []) if pod_obj.status else []:
        if cond.type == kind:
            return cond
    return None


def is_scheduled(pod_obj: Any) -> bool:
    cond = condition(pod_obj, "PodScheduled")
    return bool(pod_obj.spec.node_name) or (cond is not None and cond.status == "True")


def unschedulable_reason(pod_obj: Any) -> str:
    """KAI's reason for keeping a pod pending ('' while it has not decided)."""
    cond = condition(pod_obj, "PodScheduled")
    if cond is not None and cond.status == "False" and not pod_obj.spec.node_name:
        return f"{cond.reason}: {cond.message or ''}".strip()
    return ""


def scheduled_at(pod_obj: Any) -> float | None:
    cond = condition(pod_obj, "PodScheduled")
    if cond is not None and cond.status == "True" and cond.last_transition_time is not None:
        return float(cond.last_transition_time.timestamp())
    return None


def placement(kube: Kube, p: Params, pod_obj: Any, memory_mib: dict[str, int]) -> kai_math.Placement:
    """Where ``pod_obj`` got its GPU share, from KAI's labels and the reservation pod's report."""
    node = pod_obj.spec.node_name or ""
    ann = pod_obj.metadata.annotations or {}
    labels = pod_obj.metadata.labels or {}
    gpus = 0
    for c in pod_obj.spec.containers:
        limits = (c.resources.limits or {}) if c.resources else {}
        gpus += int(str(limits.get(GPU, "0")))
    fraction = 0.0
    if FRACTION_ANNOTATION in ann:
        fraction = float(ann[FRACTION_ANNOTATION])
    elif MEMORY_ANNOTATION in ann and memory_mib.get(node):
        fraction = min(1.0, int(ann[MEMORY_ANNOTATION]) / memory_mib[node])
    group = labels.get(GPU_GROUP_LABEL, "")
    gpu = group
    if group:
        reservations = kube.call("list reservation pods", kube.core.list_namespaced_pod, p.reservation_namespace,
                                 label_selector=f"{GPU_GROUP_LABEL}={group}").items
        for r in reservations:
            index = (r.metadata.annotations or {}).get(RESERVED_GPU_ANNOTATION)
            if index:
                gpu = f"{group}/{index}"
    return kai_math.Placement(pod=pod_obj.metadata.name, node=node, gpu=gpu, fraction=fraction, gpus=gpus)


def run_with_preflight(name: str, ctx: base.SuiteContext, pre: base.Case,
                       cases: list[tuple[str, base.Case]]) -> base.SuiteResult:
    """Run the preflight case first; if it fails, report every other case as not run (with the
    preflight's reason) instead of letting each wait out its timeout."""
    result = base.run_cases(name, ctx, [("preflight", pre)])
    first = result.cases[0]
    if first.result == "failed":
        for case_name, _fn in cases:
            result.cases.append(base.CaseResult(case_name, "skipped", "not run: preflight failed (see its reason)"))
        return result
    rest = base.run_cases(name, ctx, cases)
    result.cases.extend(rest.cases)
    result.seconds += rest.seconds
    return result
