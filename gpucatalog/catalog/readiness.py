"""Readiness gates that Helm's ``--wait`` cannot see: a component is installed only when its own
status says it is ready. Called by ``catalog.install`` (fatal) and by certification (recorded).

Kueue: its manager is ready and its admission webhooks answer (a server-side dry run).

KAI: the operator reports readiness on the ``kai-config`` Config (conditions Deployed, Available
and DependenciesFulfilled, for the current generation, as KAI's own e2e waits) and runs one
Deployment per component.
"""

from __future__ import annotations

import json
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
# Waited for even when the caller leaves readiness to the suites (certify): the next components'
# objects go through this component's admission webhooks, so installing them before it answers
# fails. Where the kubelet runs readiness probes, helm's --wait already covers this and the gate
# returns at once.
BEFORE_NEXT = frozenset({"kueue"})


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
