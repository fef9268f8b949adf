"""Readiness gates: a component is installed only when its workloads' pods are ready and its own
status (what Helm's ``--wait`` cannot see) says it is ready. Called by ``catalog.install`` after
each component: fatal for ``catalog install``, recorded as a failed step by certification.

Kueue: its manager is ready and its admission webhooks answer (a server-side dry run).

KAI: the operator reports readiness on the ``kai-config`` Config (conditions Deployed, Available
and DependenciesFulfilled, for the current generation, as KAI's own e2e waits) and runs one
Deployment per component.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpucatalog.core import errors, kubeapi

KAI_CONDITIONS = ("Deployed", "Available", "DependenciesFulfilled")
KAI_DEPLOYMENTS = ("kai-scheduler-default", "binder", "admission", "pod-grouper", "podgroup-controller", "queue-controller")


def kai_config_problems(api: Any) -> list[str]:
    """What KAI's operator reports as not ready on the ``kai-config`` Config: Deployed, Available
    and DependenciesFulfilled must be True for its current generation (as KAI's own e2e waits).
    An unreachable API server raises urllib3's ``HTTPError`` for the caller to report."""
    try:
        cfg: Any = client.CustomObjectsApi(api).get_cluster_custom_object("kai.scheduler", "v1", "configs", "kai-config")
    except ApiException as exc:
        if exc.status == 404:
            return ["Config kai-config (kai.scheduler/v1) does not exist (KAI's operator input is missing)"]
        return [f"Config kai-config: HTTP {exc.status} {exc.reason}"]
    generation = (cfg.get("metadata") or {}).get("generation")
    conditions = {c.get("type"): c for c in (cfg.get("status") or {}).get("conditions") or []}
    bad = []
    for kind in KAI_CONDITIONS:
        cond = conditions.get(kind)
        if cond is None:
            bad.append(f"{kind} not reported")
        elif cond.get("status") != "True":
            bad.append(f"{kind}={cond.get('status')} ({cond.get('reason', '')}: {cond.get('message', '')})")
        elif generation is not None and cond.get("observedGeneration") not in (None, generation):
            bad.append(f"{kind} is for generation {cond.get('observedGeneration')}, not {generation}")
    return [f"Config kai-config: {'; '.join(bad)}"] if bad else []


def kai_problems(api: Any, namespace: str) -> list[str]:
    """What is not ready yet in a KAI install (empty when ready)."""
    problems = kai_config_problems(api)
    apps = client.AppsV1Api(api)
    for name in KAI_DEPLOYMENTS:
        try:
            dep: Any = apps.read_namespaced_deployment(name, namespace)
        except ApiException as exc:
            problems.append(f"Deployment {namespace}/{name}: " + ("missing" if exc.status == 404 else f"HTTP {exc.status}"))
            continue
        if not (dep.status and dep.status.ready_replicas):
            problems.append(f"Deployment {namespace}/{name}: no ready replica")
    return problems


KUEUE_DEPLOYMENT = "kueue-controller-manager"


def kueue_problems(api: Any, namespace: str) -> list[str]:
    """What is not ready yet in a Kueue install: its manager Deployment, and its admission
    webhooks, checked by a server-side dry run of a ResourceFlavor (the API server calls Kueue's
    mutating and validating webhooks for it, through the certificates Kueue made itself)."""
    problems = []
    try:
        dep: Any = client.AppsV1Api(api).read_namespaced_deployment(KUEUE_DEPLOYMENT, namespace)
        if not (dep.status and dep.status.ready_replicas):
            problems.append(f"Deployment {namespace}/{KUEUE_DEPLOYMENT}: no ready replica")
    except ApiException as exc:
        problems.append(f"Deployment {namespace}/{KUEUE_DEPLOYMENT}: " + ("missing" if exc.status == 404 else f"HTTP {exc.status}"))
    probe = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
             "metadata": {"name": "gpu-catalog-readiness-probe"}, "spec": {}}
    try:
        client.CustomObjectsApi(api).create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "resourceflavors",
                                                                  probe, dry_run="All")
    except ApiException as exc:
        problems.append(f"Kueue's admission webhooks do not answer yet (HTTP {exc.status}: {_message(exc)})")
    return problems


def _message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message", exc.reason))[:300]
    except ValueError:
        return str(exc.reason)


GATES: dict[str, Callable[[Any, str], list[str]]] = {"kai-scheduler": kai_problems, "kueue": kueue_problems}
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")


class NotReady(errors.CheckFailed):
    """A component did not report ready within its time; the message names what is not."""

    def __init__(self, component: str, message: str, findings: list[errors.Finding]) -> None:
        super().__init__(message, findings)
        self.component = component


def _workloads(objects: Sequence[Mapping[str, Any]], namespace: str) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of the component's Deployments, StatefulSets and DaemonSets."""
    return [(str(o["kind"]), str((o.get("metadata") or {}).get("namespace") or namespace), str(o["metadata"]["name"]))
            for o in objects if o.get("kind") in WORKLOADS and (o.get("metadata") or {}).get("name")]


def workload_problems(api: Any, namespace: str, objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """The component's Deployments, StatefulSets and DaemonSets without all their pods ready."""
    apps = client.AppsV1Api(api)
    read = {"Deployment": apps.read_namespaced_deployment, "StatefulSet": apps.read_namespaced_stateful_set,
            "DaemonSet": apps.read_namespaced_daemon_set}
    problems = []
    for kind, ns, name in _workloads(objects, namespace):
        try:
            obj: Any = read[kind](name, ns)
        except ApiException as exc:
            problems.append(f"{kind} {ns}/{name}: " + ("missing" if exc.status == 404 else f"HTTP {exc.status}"))
            continue
        st = obj.status
        if kind == "DaemonSet":
            want, ready = st.desired_number_scheduled or 0, st.number_ready or 0
        else:
            want, ready = (obj.spec.replicas if obj.spec.replicas is not None else 1), (st.ready_replicas or 0)
        if ready < want:
            problems.append(f"{kind} {ns}/{name}: {ready}/{want} pods ready")
    return problems


def _workload_pods(api: Any, namespace: str, objects: Sequence[Mapping[str, Any]],
                   kinds: Sequence[str] = WORKLOADS) -> Iterator[tuple[str, Any]]:
    """("Kind ns/name", pod) for every pod a workload of ``kinds`` (by default a Deployment,
    StatefulSet or DaemonSet) of the component selects by its ``matchLabels``."""
    core = client.CoreV1Api(api)
    for kind, ns, name in _workloads(objects, namespace):
        if kind not in kinds:
            continue
        obj = next((o for o in objects if o.get("kind") == kind and o["metadata"]["name"] == name), {})
        labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if not labels:
            continue
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        pods: Any = core.list_namespaced_pod(ns, label_selector=selector)
        for pod in pods.items:
            yield f"{kind} {ns}/{name}", pod


def simulated(api: Any, namespace: str, objects: Sequence[Mapping[str, Any]]) -> bool:
    """True when every running container of the component's workload pods has no container ID:
    a kubelet (real, or the sim kubelet) always sets one; a pod only an API-level simulator (kwok)
    moves through its phases has none. Such a component's own readiness report (KAI's Config
    conditions) can never come, so its gate is not checked and the evidence says so."""
    running = []
    for _w, pod in _workload_pods(api, namespace, objects, kinds=("Deployment", "StatefulSet")):
        running += [cs for cs in (pod.status.container_statuses or []) if cs.state and cs.state.running]
    return bool(running) and all(not cs.container_id for cs in running)


# A container restarted this often and down again is crash-looping, not waiting out a dependency
# that starts beside it: a kubelet's back-off adds up to 150 s by then (10 s doubling; the sim's
# 30 s, from 2 s), so a controller that fails at every start is named before Helm's 300 s timeout.
CRASH_RESTARTS = 5


def pod_uids(api: Any, namespace: str, objects: Sequence[Mapping[str, Any]]) -> set[str]:
    """The UIDs of the component's workload pods now (those an install finds already there)."""
    return {str(pod.metadata.uid) for _w, pod in _workload_pods(api, namespace, objects)}


def crash_loops(api: Any, namespace: str, objects: Sequence[Mapping[str, Any]],
                restarts: int = CRASH_RESTARTS, before: Set[str] = frozenset()) -> list[str]:
    """The containers of the component's workload pods that keep failing: restarted at least
    ``restarts`` times and not running now (waiting in back-off, or terminated with an error).
    Pods in ``before`` (UIDs) are not judged: an install replaces a broken version's pods, which
    crash on until the new ones are ready."""
    out = []
    for workload, pod in _workload_pods(api, namespace, objects):
        st = pod.status
        if str(pod.metadata.uid) in before or not st:
            continue
        for cs in [*(st.init_container_statuses or []), *(st.container_statuses or [])]:
            if (cs.restart_count or 0) < restarts or (cs.state and cs.state.running):
                continue
            last = (cs.last_state.terminated if cs.last_state else None) or (cs.state.terminated if cs.state else None)
            waiting = cs.state.waiting.reason if cs.state and cs.state.waiting else ""
            exit_text = (f"last exit code {last.exit_code}" + (f" ({last.reason})" if last.reason else "")
                         if last else "no exit recorded")
            out.append(f"{workload}: pod {pod.metadata.name} container {cs.name} is crash-looping "
                       f"({cs.restart_count} restarts, {exit_text}" + (f", {waiting}" if waiting else "") + ")")
    return out


def wait(component: str, namespace: str, kubeconfig: Path | None, timeout_s: float, interval: float = 2.0,
         objects: Sequence[Mapping[str, Any]] = (), skip_simulated: bool = False) -> str:
    """Block until ``component`` reports ready: its workloads' pods ready and its own gate (KAI's
    Config) passing. Returns ``"ready"``, or (with ``skip_simulated``, as certification asks)
    ``"simulated"`` for a component with a gate whose pods are only simulated (see
    ``simulated``); raises ``NotReady`` naming what is not ready after ``timeout_s``."""
    gate = GATES.get(component)
    api = kubeapi.client_for(kubeconfig)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            problems = workload_problems(api, namespace, objects)
            if gate is not None and not problems:
                if skip_simulated and simulated(api, namespace, objects):
                    return "simulated"
                problems = gate(api, namespace)
        except (HTTPError, OSError) as exc:
            problems = [f"Kubernetes API unreachable: {exc}"]
        if not problems:
            return "ready"
        if time.monotonic() >= deadline:
            raise NotReady(
                component, f"{component} not ready after {timeout_s:.0f}s: " + "; ".join(problems),
                [errors.Finding(rule="readiness", message=p, component=component) for p in problems],
            )
        time.sleep(interval)
