"""Readiness gates that Helm's ``--wait`` cannot see: a component is installed only when its own
status says it is ready. Called by ``catalog.install`` (fatal) and by certification (recorded).

KAI: the operator reports readiness on the ``kai-config`` Config (conditions Deployed, Available
and DependenciesFulfilled, for the current generation, as KAI's own e2e waits) and runs one
Deployment per component.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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


GATES: dict[str, Callable[[Any, str], list[str]]] = {"kai-scheduler": kai_problems}


def wait(component: str, namespace: str, kubeconfig: Path | None, timeout_s: float, interval: float = 2.0) -> None:
    """Block until ``component`` reports ready; ``CheckFailed`` naming what is not, after ``timeout_s``."""
    gate = GATES.get(component)
    if gate is None:
        return
    api = kubeapi.client_for(kubeconfig)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            problems = gate(api, namespace)
        except (HTTPError, OSError) as exc:
            problems = [f"Kubernetes API unreachable: {exc}"]
        if not problems:
            return
        if time.monotonic() >= deadline:
            raise errors.CheckFailed(
                f"{component} not ready after {timeout_s:.0f}s: " + "; ".join(problems),
                [errors.Finding(rule="readiness", message=p, component=component) for p in problems],
            )
        time.sleep(interval)
