"""KAI's health as the suites see it: the preflight that fails fast (naming every missing piece)
when KAI, its Config, the PriorityClasses or enough GPUs are not there, and a watchdog that fails
a wait as soon as a KAI component crashes or loses its last ready pod, with the waits that go
through it.

Called by ``kai.suite`` and the KAI suites (``fractional_gpu``, ``quota_reclaim``, ``gang``).
Talks only to the Kubernetes API.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

from gpucatalog.catalog import readiness
from gpucatalog.validators.conformance.kai import params as kai_params
from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client

T = TypeVar("T")

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


# -- preflight --------------------------------------------------------------------------------


def preflight(kube: kube_client.Kube, p: kai_params.Params, components: list[str], *, min_gpus: int = 1,
              priority_classes: tuple[str, ...] = ()) -> dict[str, Any]:
    """Fail at once, naming every missing piece, unless KAI and enough GPUs are there."""
    problems: list[str] = []
    if not kube.exists("list KAI queues", kube.custom.list_cluster_custom_object, kai_params.GROUP, "v2", "queues", limit=1):
        problems.append(f"CRD queues.{kai_params.GROUP}/v2 is not installed")
    problems.extend(kai_config_problems(kube))
    problems.extend(ready_problems(kube, p, components))
    for pc in priority_classes:
        if not kube.exists(f"read PriorityClass {pc}", kube.scheduling.read_priority_class, pc):
            problems.append(f"PriorityClass {pc} does not exist (installed by team-queues)")
    capacity = gpu_inventory.gpu_capacity(kube)
    total = sum(capacity.values())
    if total < min_gpus:
        problems.append(f"the cluster has {total} allocatable {gpu_inventory.GPU} on schedulable nodes; the suite needs {min_gpus}")
    if problems:
        raise base.CaseFailed("KAI is not ready: " + "; ".join(problems))
    return {"gpu_nodes": len(capacity), "gpus": total}


def kai_config_problems(kube: kube_client.Kube) -> list[str]:
    """KAI's own readiness report on its ``kai-config`` Config (shared with ``catalog install``)."""
    try:
        return readiness.kai_config_problems(kube.api)
    except urllib3.exceptions.HTTPError as exc:
        raise base.CaseFailed(f"read Config kai-config: Kubernetes API unreachable ({exc})") from exc


def _deployment_problem(kube: kube_client.Kube, ns: str, name: str) -> str:
    try:
        dep = kube.apps.read_namespaced_deployment(name, ns)
    except ApiException as exc:
        if exc.status == 404:
            return f"Deployment {ns}/{name} does not exist"
        return f"Deployment {ns}/{name}: {kube_client.http_error(exc)}"
    except urllib3.exceptions.HTTPError as exc:
        raise base.CaseFailed(f"read Deployment {ns}/{name}: Kubernetes API unreachable ({exc})") from exc
    want = dep.spec.replicas or 1
    ready = (dep.status.ready_replicas if dep.status else 0) or 0
    if ready >= 1:
        return ""
    why = _pod_trouble(kube, ns, name)
    return f"Deployment {ns}/{name} has {ready}/{want} ready replicas" + (f" ({why})" if why else "")


def _pod_trouble(kube: kube_client.Kube, ns: str, app: str) -> str:
    pods = kube.call(f"list pods app={app}", kube.core.list_namespaced_pod, ns, label_selector=f"app={app}").items
    notes = []
    for pod in pods:
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            state = cs.state.waiting.reason if cs.state and cs.state.waiting else ""
            if state or cs.restart_count:
                notes.append(f"pod {pod.metadata.name}: {state or 'restarting'}, {cs.restart_count} restarts")
    return "; ".join(notes) if pods else "no pods"


# -- crash watchdog ----------------------------------------------------------------------------


def ready_problems(kube: kube_client.Kube, p: kai_params.Params, components: list[str]) -> list[str]:
    """The components (``DEPLOYMENTS`` keys) whose Deployment has no ready pod, each named."""
    out = []
    for comp in components:
        problem = _deployment_problem(kube, p.kai_namespace, DEPLOYMENTS[comp])
        if problem:
            out.append(f"KAI {comp}: {problem}")
    return out


def wait_ready(kube: kube_client.Kube, p: kai_params.Params, components: list[str]) -> None:
    """Wait until every one of ``components`` has a ready pod again; ``CaseFailed`` naming the
    ones that have none when ``p.wait_seconds`` run out. Called at the start of every case."""
    problems: list[str] = []

    def ready() -> bool | None:
        problems[:] = ready_problems(kube, p, components)
        return not problems or None

    try:
        base.wait_for("KAI's components to be ready", ready, p.wait_seconds, interval=0.5)
    except base.WaitTimeout as exc:
        raise base.CaseFailed(f"KAI not ready at the start of the case after {p.wait_seconds:.0f}s: "
                              + "; ".join(problems)) from exc


class Watchdog:
    """Turns a crash of a KAI component during a case into that case's failure reason.

    ``rebase`` takes the baseline (restart count per KAI pod); ``kai.suite`` does so at the start
    of every case, so a crash fails the case it happened in and the next case starts fresh.
    """

    def __init__(self, kube: kube_client.Kube, p: kai_params.Params, components: list[str]) -> None:
        self.kube, self.ns = kube, p.kai_namespace
        self.apps = {DEPLOYMENTS[c]: c for c in components}
        self.baseline = self._pods()
        self._last = 0.0

    def _pods(self) -> dict[str, tuple[str, int, bool]]:
        """KAI pod name -> (component, restarts, all containers ready)."""
        selector = f"app in ({','.join(self.apps)})"
        pods = self.kube.call("list KAI pods", self.kube.core.list_namespaced_pod, self.ns,
                              label_selector=selector).items
        out: dict[str, tuple[str, int, bool]] = {}
        for pod in pods:
            if pod.metadata.deletion_timestamp is not None:
                continue  # going away; its replacement is what counts
            statuses = (pod.status.container_statuses or []) if pod.status else []
            comp = self.apps.get((pod.metadata.labels or {}).get("app", ""), "?")
            out[pod.metadata.name] = (comp, sum(cs.restart_count for cs in statuses),
                                      bool(statuses) and all(cs.ready for cs in statuses))
        return out

    def rebase(self) -> None:
        """Count restarts from now on."""
        self.baseline = self._pods()
        self._last = 0.0

    def check(self, force: bool = False) -> None:
        """Fail (``CaseFailed`` naming the component and pod) if a KAI pod restarted or went away
        since the baseline, or a component has no ready pod. Throttled to every 2 s unless ``force``."""
        now = time.monotonic()
        if not force and now - self._last < 2.0:
            return
        self._last = now
        current = self._pods()
        for name, (comp, restarts, _ready) in sorted(current.items()):
            before = self.baseline.get(name, (comp, 0, True))[1]
            if restarts > before:
                raise base.CaseFailed(f"KAI {comp} crashed during the case: pod {self.ns}/{name} restarted "
                                      f"({before} -> {restarts} restarts)")
        for name, (comp, _restarts, _ready) in sorted(self.baseline.items()):
            if name not in current:
                raise base.CaseFailed(f"KAI {comp} lost pod {self.ns}/{name} during the case (deleted or evicted)")
        for app, comp in self.apps.items():
            if not any(c == comp and ready for c, _r, ready in current.values()):
                raise base.CaseFailed(f"KAI {comp}: Deployment {self.ns}/{app} has no ready pod during the case")


def wait(dog: Watchdog, what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """``base.wait_for`` that also fails fast when a KAI component crashes meanwhile."""
    return base.wait_for(what, probe, timeout, interval=0.5, guard=dog.check)


def stays(dog: Watchdog, what: str, probe: Callable[[], bool], seconds: float) -> None:
    """``base.holds`` (``probe`` stays true for ``seconds``) that also fails fast when a KAI
    component crashes meanwhile."""
    base.holds(what, probe, seconds, guard=dog.check)
