"""The remediation controller's I/O loop: read GPU nodes, ask :mod:`engine` for plans, carry
them out (node patch with optimistic concurrency, evictions, repairs, verification workloads,
Slurm, Events), and persist the circuit breaker. Only the leader (Lease) acts.

Retry policy lives in the error types: a :class:`TemporaryError` backs the node off for its
``delay`` and the next pass decides again from the node's stored state; a
:class:`PermanentError` for a vanished node drops it. Called by ``main controller``.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpucatalog.gpuhealth import conditions, engine, health, kube
from gpucatalog.gpuhealth.actuator import Actuator
from gpucatalog.gpuhealth.breaker import Breaker
from gpucatalog.gpuhealth.errors import PermanentError, RemediationError, TemporaryError
from gpucatalog.gpuhealth.findings import FAULT_CONDITIONS
from gpucatalog.gpuhealth.leader import Elector
from gpucatalog.gpuhealth.slurm import NoSlurm, SlurmHook
from gpucatalog.gpuhealth.xidpolicy import Action

COMPONENT = "gpu-health-controller"
VERIFY_PREFIX = "gpu-health-verify-"
VERIFY_FOR = engine.PREFIX + "verify-for"


@dataclass
class ControllerConfig:
    namespace: str
    policy: engine.Policy = field(default_factory=engine.Policy)
    node_selector: str = "nvidia.com/gpu.present=true"
    interval_s: float = 2.0
    breaker_share: float = 0.25
    breaker_window_s: float = 600.0
    breaker_configmap: str = "gpu-health-breaker"
    verify_mode: str = "pod"  # pod | conditions
    verify_configmap: str = "gpu-health-verify"
    event_namespace: str = "default"
    leader_election: bool = True
    lease_name: str = "gpu-health-controller"
    identity: str = "gpu-health-controller"


def log(msg: str, **kv: Any) -> None:
    extra = " ".join(f"{k}={v}" for k, v in kv.items())
    print(f"{engine.iso(time.time())} {msg} {extra}".rstrip(), file=sys.stderr, flush=True)


def node_view(node: dict[str, Any]) -> engine.NodeView:
    """Project a Node object onto what the engine decides on (pure)."""
    meta = node.get("metadata") or {}
    conds = (node.get("status") or {}).get("conditions") or []
    actions: list[Action] = []
    summaries: list[str] = []
    detected = ""
    unknown = False
    for c in conds:
        a = conditions.action_of(c)
        if a is not None:
            actions.append(a)
            summaries.append(f"{c.get('type')}: {str(c.get('message', ''))[:300]}")
            detected = max(detected, str(c.get("lastTransitionTime") or ""))
        elif c.get("type") in FAULT_CONDITIONS and c.get("status") == "Unknown":
            unknown = True
    return engine.NodeView(
        name=str(meta.get("name")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
        fault=max(actions) if actions else None,
        fault_summary=" / ".join(summaries)[:900],
        fault_unknown=unknown,
        detected_at=detected,
    )


def drainable(pod: dict[str, Any], own_namespace: str) -> bool:
    meta = pod.get("metadata") or {}
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return False
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
        return False
    return not (meta.get("namespace") == own_namespace and str(meta.get("name", "")).startswith(VERIFY_PREFIX))


class Controller:
    def __init__(self, api: kube.Api, cfg: ControllerConfig, actuator: Actuator,
                 slurm: SlurmHook | None = None, logger: Callable[..., None] = log) -> None:
        self.api = api
        self.cfg = cfg
        self.actuator = actuator
        self.slurm: SlurmHook = slurm or NoSlurm()
        self.log = logger
        self.not_before: dict[str, float] = {}
        self.elector = Elector(api, cfg.namespace, cfg.lease_name, cfg.identity)
        self._dry_seen: set[str] = set()

    # --- breaker persistence ------------------------------------------------------------
    def _cm_path(self, name: str = "") -> str:
        base = f"/api/v1/namespaces/{self.cfg.namespace}/configmaps"
        return f"{base}/{name}" if name else base

    def load_breaker(self) -> tuple[Breaker, dict[str, Any] | None]:
        try:
            cm = self.api.get(self._cm_path(self.cfg.breaker_configmap))
        except kube.NotFound:
            return Breaker.from_data(None, self.cfg.breaker_share, self.cfg.breaker_window_s), None
        return Breaker.from_data(cm.get("data"), self.cfg.breaker_share, self.cfg.breaker_window_s), cm

    def save_breaker(self, breaker: Breaker, cm: dict[str, Any] | None, total: int) -> None:
        data = breaker.to_data(total)
        if cm is None:
            self.api.create(self._cm_path(), {"apiVersion": "v1", "kind": "ConfigMap", "data": data,
                                              "metadata": {"name": self.cfg.breaker_configmap,
                                                           "namespace": self.cfg.namespace}})
        elif cm.get("data") != data:
            cm = dict(cm)
            cm["data"] = data
            self.api.replace(self._cm_path(self.cfg.breaker_configmap), cm)  # resourceVersion guards

    # --- one pass -----------------------------------------------------------------------
    def enrich(self, view: engine.NodeView) -> engine.NodeView:
        if view.state in (engine.QUARANTINED, engine.DRAINING):
            view = dataclasses.replace(view, slurm_busy=self.slurm_busy(view.name))
        if view.state == engine.DRAINING:
            pods = [p for p in self.api.pods_on_node(view.name) if drainable(p, self.cfg.namespace)]
            return dataclasses.replace(view, pods_remaining=len(pods))
        if view.state == engine.VERIFYING:
            since = view.annotations.get(engine.A_VERIFY_STARTED, "")
            return dataclasses.replace(view, verify=self.verify_status(view.name, since))
        return view

    def verify_status(self, node: str, since: str) -> str | None:
        """Result of *this* verification; a pod left from an earlier one (same name, still
        terminating) never counts, so a stale success cannot release a node."""
        if self.cfg.verify_mode == "conditions":
            return "passed"  # the engine still requires every fault condition to be False
        try:
            pod = self.api.get(f"/api/v1/namespaces/{self.cfg.namespace}/pods/{VERIFY_PREFIX}{node}")
        except kube.NotFound:
            return None
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or (meta.get("annotations") or {}).get(VERIFY_FOR) != since:
            self.api.delete_pod(self.cfg.namespace, VERIFY_PREFIX + node, grace=0)
            return "running"  # recreated by the next pass once the old one is gone
        phase = (pod.get("status") or {}).get("phase")
        return {"Succeeded": "passed", "Failed": "failed"}.get(str(phase), "running")

    def reconcile_once(self, now: float | None = None) -> list[engine.Plan]:
        now = time.time() if now is None else now
        nodes = self.api.items("/api/v1/nodes", {"labelSelector": self.cfg.node_selector})
        raw = {str(n["metadata"]["name"]): n for n in nodes}
        views = []
        for n in nodes:
            v = node_view(n)
            if self.not_before.get(v.name, 0.0) > now:
                continue
            try:
                views.append(self.enrich(v))
            except TemporaryError as exc:
                self._backoff(v.name, now, exc)
            except PermanentError as exc:
                self.log("node skipped", node=v.name, error=exc)
        breaker, cm = self.load_breaker()
        total = len(nodes)
        plans = engine.decide_all(views, breaker, self.cfg.policy, now, total=total)
        # The breaker's decision is recorded before it is acted on: a reader that sees a node
        # quarantined or refused must find the breaker that admitted or refused it, and a lost
        # save must not leave quarantines the breaker does not know about.
        unrecorded = False
        if breaker.changed and not self.cfg.policy.dry_run:
            try:
                self.save_breaker(breaker, cm, total)
            except RemediationError as exc:
                unrecorded = True
                self.log("breaker not saved; new quarantines wait for the next pass", error=exc)
        for plan in plans:
            if plan.empty or (unrecorded and plan.state_from == engine.HEALTHY):
                continue
            try:
                self.execute(plan, raw[plan.node], now)
            except TemporaryError as exc:
                self._backoff(plan.node, now, exc)
            except PermanentError as exc:
                self.log("plan abandoned", node=plan.node, error=exc)
        return plans

    def _backoff(self, node: str, now: float, exc: TemporaryError) -> None:
        self.not_before[node] = now + exc.delay
        self.log("retry later", node=node, delay=exc.delay, error=exc)

    # --- effects ------------------------------------------------------------------------
    def execute(self, plan: engine.Plan, node: dict[str, Any], now: float) -> None:
        if self.cfg.policy.dry_run:
            key = f"{plan.node}:{plan.state_from}->{plan.state_to}:{[e.kind for e in plan.effects]}"
            if key not in self._dry_seen:
                self._dry_seen.add(key)
                self.log("DRY-RUN plan", node=plan.node, transition=f"{plan.state_from}->{plan.state_to}",
                         patch=json.dumps(plan.patch()), effects=[e.kind for e in plan.effects])
            return
        body = plan.patch()
        if body:
            body.setdefault("metadata", {})["resourceVersion"] = node["metadata"]["resourceVersion"]
            self.api.patch_node(plan.node, body)
        if plan.state_from != plan.state_to:
            self.log("transition", node=plan.node, state=f"{plan.state_from}->{plan.state_to}")
        for eff in plan.effects:
            self.effect(plan.node, eff, now)

    def effect(self, node: str, eff: engine.Effect, now: float) -> None:
        if eff.kind == "event":
            self.api.create_event(self.cfg.event_namespace, node, eff.event_type, eff.reason, eff.message,
                                  COMPONENT, now_iso=engine.iso(now))
        elif eff.kind in ("evict", "force-delete"):
            self.evict_all(node, force=eff.kind == "force-delete")
        elif eff.kind == "repair" and eff.action is not None:
            self.repair(node, eff.action, eff.reason)
        elif eff.kind == "verify":
            self.start_verify(node)
        elif eff.kind == "cleanup-verify":
            if self.cfg.verify_mode == "pod":
                self.api.delete_pod(self.cfg.namespace, VERIFY_PREFIX + node, grace=0)
        elif eff.kind == "slurm-drain":
            if self._slurm(lambda: self.slurm.drain(node, eff.reason), node) is False:
                self.log("slurm node already drained by someone else; reason left alone", node=node)
        elif eff.kind == "slurm-resume":
            self._slurm(lambda: self.slurm.resume(node), node)

    def slurm_busy(self, node: str) -> bool:
        """Whether Slurm still runs jobs on ``node`` (a node Slurm does not know runs none). While
        Slurm cannot be asked, it may: the node waits, and its drain timeout still runs."""
        try:
            return self.slurm.busy(node)
        except PermanentError:
            return False
        except TemporaryError as exc:
            self.log("slurm state unknown; the drain waits", node=node, error=exc)
            return True

    def _slurm(self, call: Callable[[], object], node: str) -> object:
        try:
            return call()
        except RemediationError as exc:
            self.log("slurm hook failed", node=node, error=exc)
            return None

    def evict_all(self, node: str, force: bool = False) -> None:
        blocked = 0
        for pod in self.api.pods_on_node(node):
            meta = pod["metadata"]
            if not drainable(pod, self.cfg.namespace) or meta.get("deletionTimestamp"):
                continue
            try:
                if force:
                    self.api.delete_pod(meta["namespace"], meta["name"], grace=0)
                else:
                    self.api.evict(meta["namespace"], meta["name"])
            except kube.NotFound:
                continue
            except PermanentError as exc:  # e.g. 403 while the pod's namespace is being deleted
                blocked += 1
                self.log("eviction failed", node=node, pod=f"{meta['namespace']}/{meta['name']}", error=exc)
            except TemporaryError as exc:  # 429: a PodDisruptionBudget says not now
                blocked += 1
                self.log("eviction refused", node=node, pod=f"{meta['namespace']}/{meta['name']}", error=exc)
        if blocked:
            self.log("drain waiting on PDBs", node=node, blocked=blocked)

    def repair(self, node: str, action: Action, reason: str) -> None:
        try:
            result, detail = self.actuator.repair(node, action, reason)
        except TemporaryError as exc:
            # let the engine start this repair again after the delay
            self.api.patch_node(node, {"metadata": {"annotations": {engine.A_REPAIR_STARTED: None}}})
            raise exc
        self.log("repair finished", node=node, action=action.name, result=result, detail=detail)
        self.api.patch_node(node, {"metadata": {"annotations": {
            engine.A_REPAIR_RESULT: result, engine.PREFIX + "repair-detail": detail[:500]}}})

    def start_verify(self, node: str) -> None:
        if self.cfg.verify_mode != "pod":
            return
        current = self.api.get(f"/api/v1/nodes/{node}")
        since = ((current.get("metadata") or {}).get("annotations") or {}).get(engine.A_VERIFY_STARTED, "")
        cm = self.api.get(self._cm_path(self.cfg.verify_configmap))
        pod = verify_pod(json.loads((cm.get("data") or {})["pod.json"]), node, self.cfg.namespace, since)
        try:
            self.api.create(f"/api/v1/namespaces/{self.cfg.namespace}/pods", pod)
        except kube.Conflict:
            return

    # --- loop ---------------------------------------------------------------------------
    def run(self, stop: threading.Event, probe: health.Health | None = None) -> None:
        leading = False
        while not stop.is_set():
            ok, error = True, ""
            try:
                is_leader = (not self.cfg.leader_election) or self.elector.try_acquire()
                if is_leader != leading:
                    self.log("leadership", leader=is_leader, identity=self.cfg.identity)
                    leading = is_leader
                if is_leader:
                    self.reconcile_once()
            except RemediationError as exc:
                self.log("pass failed; will retry", error=exc)
                ok, error = False, str(exc)
            if probe is not None:  # a standby replica that reaches the API is as ready as the leader
                probe.beat(ok, error)
            stop.wait(self.cfg.interval_s)
        if leading and self.cfg.leader_election:
            try:
                self.elector.release()
                self.log("lease released", identity=self.cfg.identity)
            except RemediationError as exc:
                self.log("lease not released; it will expire", error=exc)


def verify_pod(template: dict[str, Any], node: str, namespace: str, since: str = "") -> dict[str, Any]:
    """The verification workload: the chart's pod template pinned to ``node`` (bypassing the
    scheduler, so the cordon does not keep it off), never restarted, tagged with the
    verification it belongs to (``since`` = the node's verify-started annotation)."""
    pod = copy.deepcopy(template)
    meta = pod.setdefault("metadata", {})
    meta["name"] = VERIFY_PREFIX + node
    meta["namespace"] = namespace
    meta.setdefault("annotations", {})[VERIFY_FOR] = since
    meta.setdefault("labels", {})["app.kubernetes.io/component"] = "verify"
    meta["labels"][engine.PREFIX + "verify-node"] = hashlib.sha1(node.encode()).hexdigest()[:10]
    spec = pod.setdefault("spec", {})
    spec["nodeName"] = node
    spec["restartPolicy"] = "Never"
    spec.setdefault("tolerations", []).append({"operator": "Exists"})
    for c in spec.get("containers", []):
        env = c.setdefault("env", [])
        if not any(e.get("name") == "NODE_NAME" for e in env):
            env.append({"name": "NODE_NAME", "value": node})
    return pod
