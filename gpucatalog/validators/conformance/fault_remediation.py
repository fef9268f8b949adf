"""Conformance suite ``fault_remediation``: gpu-health turns injected GPU faults into node
conditions, Events and a safe cordon -> drain -> repair -> verify -> uncordon cycle.

Talks only to the Kubernetes API plus the fault-injection callable the runner passes in
``ctx.params["inject_fault"]`` — ``inject_fault(node, kind, **kw)`` with kinds ``xid`` (``code``,
``gpu``), ``row-remap-pending``, ``row-remap-failure``, ``ib-rate`` and ``clear`` (on the sim
cluster: ``SimCluster.inject_fault`` / ``catalog cluster inject-fault``). Other params:
``gpu_health_namespace`` (default ``gpu-health``), ``node_selector`` (GPU nodes, default
``nvidia.com/gpu.present=true``). The observable contract it checks (label, annotations,
condition types, breaker ConfigMap) is written down here on purpose, not imported from the
implementation. Needs at least 4 GPU nodes.
"""

from __future__ import annotations

import datetime
import json
import math
import time
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from gpucatalog.validators.conformance.base import (
    CaseFailed,
    CaseResult,
    SuiteContext,
    SuiteResult,
    run_cases,
    wait_for,
)

NAME = "fault_remediation"
PREFIX = "gpu-health.gpu-catalog.io/"
STATE = PREFIX + "state"
TIMELINE = PREFIX + "timeline"
SKIPPED = PREFIX + "skipped"
RESOLVED = PREFIX + "resolved"
ACTION = PREFIX + "repair-action"
CORDONED_BY = PREFIX + "cordoned-by"
BREAKER_CM = "gpu-health-breaker"

Injector = Callable[..., Any]


class Rest:
    """Plain-JSON access through the kubernetes client's ApiClient (auth/TLS from kubeconfig)."""

    def __init__(self, kubeconfig: str) -> None:
        cfg = k8s_client.Configuration()
        k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
        self.api = k8s_client.ApiClient(cfg)

    def call(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None,
             content_type: str = "application/json", ok404: bool = False) -> dict[str, Any]:
        url = path + ("?" + urllib.parse.urlencode(query) if query else "")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        params = self.api.param_serialize(method=method, resource_path=url, header_params=headers,
                                          body=body,
                                          auth_settings=["BearerToken"])
        resp = self.api.call_api(*params, _request_timeout=30)
        raw = resp.read()  # type: ignore[no-untyped-call]
        status = int(resp.status)
        text = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        if status == 404 and ok404:
            return {}
        if not 200 <= status < 300:
            raise CaseFailed(f"{method} {path}: HTTP {status}: {text[:300]}")
        return json.loads(text) if text.strip() else {}

    def node(self, name: str) -> dict[str, Any]:
        return self.call("GET", f"/api/v1/nodes/{name}")

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.call("PATCH", f"/api/v1/nodes/{name}", body, content_type="application/merge-patch+json")


# --- observations -------------------------------------------------------------------------
def labels(n: dict[str, Any]) -> dict[str, str]:
    return dict(n["metadata"].get("labels") or {})


def annots(n: dict[str, Any]) -> dict[str, str]:
    return dict(n["metadata"].get("annotations") or {})


def state(n: dict[str, Any]) -> str:
    return labels(n).get(STATE, "healthy")


def cordoned(n: dict[str, Any]) -> bool:
    return bool((n.get("spec") or {}).get("unschedulable"))


def condition(n: dict[str, Any], ctype: str) -> dict[str, Any]:
    for c in (n.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return {}


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z"


class Env:
    """What every case needs: the API, the injector, the GPU nodes and timeouts."""

    def __init__(self, ctx: SuiteContext) -> None:
        inj = ctx.params.get("inject_fault")
        if not callable(inj):
            raise CaseFailed("ctx.params['inject_fault'] (a function(node, kind, **kw)) is required")
        self.inject: Injector = inj
        self.ctx = ctx
        self.kube = Rest(str(ctx.kubeconfig))
        self.ns = str(ctx.params.get("gpu_health_namespace", "gpu-health"))
        self.selector = str(ctx.params.get("node_selector", "nvidia.com/gpu.present=true"))
        nodes = self.kube.call("GET", "/api/v1/nodes", query={"labelSelector": self.selector})["items"]
        self.nodes = sorted(n["metadata"]["name"] for n in nodes)
        if len(self.nodes) < 4:
            raise CaseFailed(f"needs at least 4 GPU nodes ({self.selector}), found {len(self.nodes)}")

    def t(self, seconds: float) -> float:
        return seconds * self.ctx.timeout_scale

    def wait_node(self, node: str, what: str, pred: Callable[[dict[str, Any]], bool], timeout: float) -> float:
        wait_for(f"{node}: {what}", lambda: pred(self.kube.node(node)), self.t(timeout))
        return time.time()

    def ensure_healthy(self, node: str, timeout: float = 90) -> None:
        """Wait for ``node`` to be healthy; the breaker is reset so that one case's quarantines
        do not count against the next (only the breaker case tests the breaker)."""
        self.reset_breaker()
        self.wait_node(node, "healthy, schedulable, no fault condition", lambda n: (
            state(n) == "healthy" and not cordoned(n)
            and condition(n, "GpuXidError").get("status") == "False"
            and condition(n, "GpuMemoryError").get("status") == "False"
            and condition(n, "InfinibandDegraded").get("status") == "False"), timeout)

    def events(self, node: str, reason: str) -> list[dict[str, Any]]:
        items = self.kube.call("GET", "/api/v1/events", query={
            "fieldSelector": f"involvedObject.kind=Node,involvedObject.name={node},reason={reason}"})["items"]
        return list(items)

    def breaker(self) -> dict[str, str]:
        cm = self.kube.call("GET", f"/api/v1/namespaces/{self.ns}/configmaps/{BREAKER_CM}", ok404=True)
        return dict(cm.get("data") or {})

    def reset_breaker(self) -> None:
        """The deliberate human reset (as ``gpu-health breaker-reset`` does)."""
        path = f"/api/v1/namespaces/{self.ns}/configmaps/{BREAKER_CM}"
        if self.kube.call("GET", path, ok404=True):
            self.kube.call("PATCH", path, {"data": {"status": "CLOSED", "entries": "", "trippedAt": "",
                                                     "trippedReason": ""}},
                           content_type="application/merge-patch+json")

    def clear(self, node: str) -> None:
        self.inject(node, "clear")

    def release(self, node: str, timeout: float = 180) -> None:
        """Wait until ``node`` is back in service, resolving it as a technician would when
        gpu-health parked it for hardware repair or for a person (escalated)."""

        def back() -> bool:
            n = self.kube.node(node)
            if state(n) in ("hardware-repair", "escalated") and RESOLVED not in annots(n):
                self.kube.patch_node(node, {"metadata": {"annotations": {RESOLVED: "true"}}})
            return state(n) == "healthy" and not cordoned(n)

        wait_for(f"{node}: back in service", back, self.t(timeout))


def _as_steps(times: dict[str, str], t0: float) -> list[dict[str, Any]]:
    """``{state: ISO time}`` as the report's ``[{state, t}]`` (seconds since the fault), in order."""
    steps = []
    for state_name, iso in times.items():
        try:
            at = datetime.datetime.fromisoformat(iso).timestamp()
        except (TypeError, ValueError):
            continue
        steps.append({"state": state_name, "t": round(at - t0, 3)})
    return sorted(steps, key=lambda st: float(st["t"]))


def _timeline(n: dict[str, Any]) -> dict[str, str]:
    try:
        value = json.loads(annots(n).get(TIMELINE) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# --- cases --------------------------------------------------------------------------------
def case_agents_report(env: Env, res: CaseResult) -> None:
    """Every GPU node carries gpu-health's conditions (the agent DaemonSet runs everywhere)."""
    for node in env.nodes:
        env.wait_node(node, "GpuXidError condition present", lambda n: bool(condition(n, "GpuXidError")), 120)
    env.reset_breaker()
    for node in env.nodes:
        env.ensure_healthy(node)
    res.details["gpu_nodes"] = len(env.nodes)


def _workload(env: Env, ns: str, node: str, other: str) -> None:
    """One pod on the faulty node and one elsewhere, under a PDB that first forbids any eviction."""
    k = env.kube
    k.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for name, where in (("on-faulty", node), ("elsewhere", other)):
        k.call("POST", f"/api/v1/namespaces/{ns}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "training"}},
            "spec": {"nodeName": where, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                     "tolerations": [{"operator": "Exists"}]}})
    k.call("POST", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "training"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "training"}}}})
    wait_for("workload pods Ready and PDB observed", lambda: (
        all(c.get("type") != "Ready" or c.get("status") == "True"
            for p in k.call("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
            for c in (p.get("status") or {}).get("conditions") or [])
        and len(k.call("GET", f"/api/v1/namespaces/{ns}/pods")["items"]) == 2
        and (k.call("GET", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/training").get("status") or {})
        .get("currentHealthy") == 2), env.t(60))


def case_xid79_full_cycle(env: Env, res: CaseResult) -> None:
    node, other = env.nodes[0], env.nodes[1]
    ns = f"fault-remediation-{uuid.uuid4().hex[:6]}"
    k = env.kube
    env.ensure_healthy(node)
    _workload(env, ns, node, other)
    steps: dict[str, str] = {}
    t0 = time.time()
    steps["injected"] = now_iso()
    env.inject(node, "xid", code=79, gpu=2)
    try:
        env.wait_node(node, "GpuXidError=True naming XID 79", lambda n: (
            condition(n, "GpuXidError").get("status") == "True"
            and "XID 79" in condition(n, "GpuXidError").get("message", "")), 60)
        steps["condition"] = now_iso()
        msg = condition(k.node(node), "GpuXidError")["message"]
        if "PCI 0000:" not in msg or "action=REBOOT" not in msg:
            raise CaseFailed(f"condition message lacks the GPU's PCI address or the action: {msg[:200]}")
        # the index is known when the agent saw the GPU before it fell off the bus
        res.details["condition_names_gpu_index"] = "GPU 2 " in msg
        env.wait_node(node, "cordoned by gpu-health", lambda n: cordoned(n) and annots(n).get(CORDONED_BY) == "gpu-health", 30)
        steps["cordoned"] = now_iso()
        env.wait_node(node, "draining", lambda n: state(n) == "draining", 30)
        # the PDB allows no disruption: the pod must still be there a while later
        time.sleep(env.t(4))
        pod = k.call("GET", f"/api/v1/namespaces/{ns}/pods/on-faulty", ok404=True)
        if not pod or (pod.get("metadata") or {}).get("deletionTimestamp"):
            raise CaseFailed("pod evicted although its PodDisruptionBudget allowed no disruption")
        if state(k.node(node)) != "draining":
            raise CaseFailed(f"left draining while the PDB blocked eviction (state {state(k.node(node))})")
        steps["pdb_blocked_checked"] = now_iso()
        k.call("PATCH", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/training",
               {"spec": {"minAvailable": 1}}, content_type="application/merge-patch+json")
        steps["pdb_relaxed"] = now_iso()
        wait_for("pod on the faulty node evicted", lambda: not k.call(
            "GET", f"/api/v1/namespaces/{ns}/pods/on-faulty", ok404=True), env.t(60))
        steps["evicted"] = now_iso()
        if not k.call("GET", f"/api/v1/namespaces/{ns}/pods/elsewhere", ok404=True):
            raise CaseFailed("the pod on a healthy node was evicted too")
        env.wait_node(node, "back in service (healthy, uncordoned)", lambda n: state(n) == "healthy" and not cordoned(n), 120)
        steps["uncordoned"] = now_iso()
        tl = _timeline(k.node(node))
        for key in ("quarantined", "draining", "repairing", "verifying", "healthy"):
            if key not in tl:
                raise CaseFailed(f"controller timeline lacks step {key!r}: {tl}")
        repair = [e for e in env.events(node, "RepairStarted") if "REBOOT" in e.get("message", "")]
        if not repair:
            raise CaseFailed("no RepairStarted event for REBOOT")
        res.details.update({"node": node, "checkpoints": steps, "controller_timeline": tl,
                            "steps": _as_steps({**steps, **tl}, t0),
                            "fault_to_back_in_service_s": round(time.time() - t0, 2)})
    finally:
        k.call("DELETE", f"/api/v1/namespaces/{ns}", ok404=True)
        env.clear(node)
        env.release(node)


def case_application_xid_event_only(env: Env, res: CaseResult) -> None:
    node = env.nodes[3]
    env.ensure_healthy(node)
    try:
        env.inject(node, "xid", code=13, gpu=1)
        env.inject(node, "xid", code=43, gpu=1)
        for reason in ("Xid13", "Xid43"):
            wait_for(f"{node}: Event {reason}", lambda r=reason: env.events(node, r), env.t(60))  # type: ignore[misc]
        res.details["events_at"] = now_iso()
        deadline = time.time() + env.t(8)
        while time.time() < deadline:  # several controller passes
            n = env.kube.node(node)
            if cordoned(n) or state(n) != "healthy":
                raise CaseFailed(f"application XID led to {state(n)}/cordon")
            if condition(n, "GpuXidError").get("status") != "False":
                raise CaseFailed(f"application XID raised GpuXidError: {condition(n, 'GpuXidError')}")
            time.sleep(0.5)
        res.details["node"] = node
    finally:
        env.clear(node)


def _repair_path(env: Env, res: CaseResult, kind: str, want_action: str, node: str) -> dict[str, Any]:
    env.ensure_healthy(node)
    t0 = time.time()
    env.inject(node, kind, gpu=3)
    env.wait_node(node, "GpuMemoryError=True", lambda n: condition(n, "GpuMemoryError").get("status") == "True", 60)
    env.wait_node(node, f"repair action {want_action}", lambda n: annots(n).get(ACTION) == want_action, 60)
    res.details.update({"node": node, "action": want_action, "action_chosen_after_s": round(time.time() - t0, 2)})
    return {"node": node, "t0": t0}


def case_pending_remap_gpu_reset(env: Env, res: CaseResult) -> None:
    info = _repair_path(env, res, "row-remap-pending", "RESET_GPU", env.nodes[1])
    node = info["node"]
    try:
        env.wait_node(node, "back in service", lambda n: state(n) == "healthy" and not cordoned(n), 120)
        res.details["back_in_service_s"] = round(time.time() - info["t0"], 2)
        res.details["controller_timeline"] = _timeline(env.kube.node(node))
    finally:
        env.clear(node)
        env.release(node)


def case_failed_remap_hardware_repair(env: Env, res: CaseResult) -> None:
    info = _repair_path(env, res, "row-remap-failure", "HARDWARE_REPAIR", env.nodes[2])
    node = info["node"]
    try:
        env.wait_node(node, "state hardware-repair", lambda n: state(n) == "hardware-repair", 60)
        time.sleep(env.t(5))
        n = env.kube.node(node)
        if not cordoned(n) or state(n) != "hardware-repair":
            raise CaseFailed(f"hardware-repair node did not stay cordoned: {state(n)}, cordoned={cordoned(n)}")
        if not env.events(node, "HardwareRepairRequested"):
            raise CaseFailed("no HardwareRepairRequested event")
        res.details["stayed_cordoned"] = True
        # the technician replaces the GPU and marks the node resolved; gpu-health verifies and releases it
        env.clear(node)
        env.kube.patch_node(node, {"metadata": {"annotations": {RESOLVED: "true"}}})
        env.wait_node(node, "released after resolution", lambda n: state(n) == "healthy" and not cordoned(n), 120)
        res.details["released_after_resolution"] = True
    finally:
        env.clear(node)
        env.release(node)


def case_ib_half_rate(env: Env, res: CaseResult) -> None:
    node = env.nodes[1]
    env.ensure_healthy(node)
    try:
        env.inject(node, "ib-rate")
        env.wait_node(node, "InfinibandDegraded=True (rate)", lambda n: (
            condition(n, "InfinibandDegraded").get("status") == "True"
            and condition(n, "InfinibandDegraded").get("reason") == "InfinibandRateDegraded"), 60)
        res.details["message"] = condition(env.kube.node(node), "InfinibandDegraded")["message"][:300]
        # a degraded fabric port is acted on like any other fault (default action: reboot)
        env.wait_node(node, "quarantined for the degraded port",
                      lambda n: annots(n).get(CORDONED_BY) == "gpu-health", 30)
        res.details["quarantined"] = True
    finally:
        env.clear(node)
        env.release(node)


def case_breaker_caps_quarantines(env: Env, res: CaseResult) -> None:
    env.reset_breaker()
    # the last nodes: the earlier cases used the first ones (a fourth fault on one node in a day
    # would rightly be sent to hardware repair as a flapping node)
    targets = env.nodes[-math.ceil(len(env.nodes) * 0.6):]
    for node in targets:
        env.ensure_healthy(node)
    try:
        for node in targets:
            env.inject(node, "xid", code=79, gpu=0)
        wait_for("every faulty node either quarantined or refused by the breaker", lambda: all(
            cordoned(n) or annots(n).get(SKIPPED) == "circuit-breaker-open"
            for n in (env.kube.node(x) for x in targets)), env.t(60))
        data = env.breaker()
        limit = int(data.get("limit", "0"))
        quarantined = [x for x in targets if annots(env.kube.node(x)).get(CORDONED_BY) == "gpu-health"]
        refused = [x for x in targets if annots(env.kube.node(x)).get(SKIPPED) == "circuit-breaker-open"]
        res.details.update({"faulty": len(targets), "limit": limit, "quarantined": len(quarantined),
                            "refused": len(refused), "breaker": data.get("status")})
        if not 0 < len(quarantined) <= limit:
            raise CaseFailed(f"{len(quarantined)} nodes quarantined, breaker limit {limit}")
        if data.get("status") != "TRIPPED" or len(quarantined) + len(refused) != len(targets):
            raise CaseFailed(f"breaker {data.get('status')}, refused {refused}")
    finally:
        for node in targets:
            env.clear(node)
        for node in targets:
            env.release(node)
        env.reset_breaker()


def case_manual_cordon_respected(env: Env, res: CaseResult) -> None:
    node = env.nodes[2]
    env.ensure_healthy(node)
    env.kube.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        env.inject(node, "xid", code=79, gpu=1)
        env.wait_node(node, "GpuXidError=True", lambda n: condition(n, "GpuXidError").get("status") == "True", 60)
        env.wait_node(node, "skipped as cordoned by someone else",
                      lambda n: annots(n).get(SKIPPED) == "cordoned-by-someone-else", 30)
        env.clear(node)
        env.wait_node(node, "fault condition cleared", lambda n: condition(n, "GpuXidError").get("status") == "False", 60)
        time.sleep(env.t(4))
        n = env.kube.node(node)
        if not cordoned(n) or state(n) != "healthy" or CORDONED_BY in annots(n):
            raise CaseFailed(f"manually cordoned node was touched: state={state(n)} cordoned={cordoned(n)}")
        res.details["stayed_cordoned"] = True
    finally:
        env.clear(node)
        env.kube.patch_node(node, {"spec": {"unschedulable": False}})


CASES: list[tuple[str, Callable[[Env, CaseResult], None]]] = [
    ("agents_report_conditions", case_agents_report),
    ("xid79_cordon_drain_repair_verify_uncordon", case_xid79_full_cycle),
    ("application_xid_event_no_cordon", case_application_xid_event_only),
    ("pending_row_remap_gpu_reset", case_pending_remap_gpu_reset),
    ("failed_row_remap_hardware_repair", case_failed_remap_hardware_repair),
    ("ib_port_half_rate_detected", case_ib_half_rate),
    ("breaker_caps_quarantines_at_60pct_faults", case_breaker_caps_quarantines),
    ("manual_cordon_never_uncordoned", case_manual_cordon_respected),
]


def run(ctx: SuiteContext) -> SuiteResult:
    holder: dict[str, Env] = {}

    def bind(fn: Callable[[Env, CaseResult], None]) -> Callable[[SuiteContext, CaseResult], None]:
        def case(c: SuiteContext, res: CaseResult) -> None:
            if "env" not in holder:
                holder["env"] = Env(c)
            fn(holder["env"], res)
        return case

    return run_cases(NAME, ctx, [(name, bind(fn)) for name, fn in CASES])
