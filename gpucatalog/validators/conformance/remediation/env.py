"""What every ``fault_remediation`` case works with: the Kubernetes client, the fault injector
the runner passed in (or :func:`no_injection`, which reports each fault case as not run), the GPU nodes (at least 4), waits on a node's state with the suite's scaled
timeouts, gpu-health's Events and breaker, and putting a node back in service.

Called by ``fault_remediation`` and ``bench/gpuhealth_latency.py``. Talks only to the Kubernetes
API and the injector.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpucatalog.validators.conformance.kit import base, kube_client
from gpucatalog.validators.conformance.remediation import contract as rc

Injector = Callable[..., Any]
# gpu-health's chart defaults (charts/gpu-health/values.yaml), for a bundle that sets neither
CHART_INTERVALS = {"agent": 10.0, "controller": 2.0}
CHART_TIMEOUTS = {"repairTimeoutSeconds": 1200.0, "verifyTimeoutSeconds": 600.0}


def no_injection(node: str, kind: str, **_kw: Any) -> Any:
    """The injector of a cluster that offers none: every fault case is not run, saying why."""
    raise base.CaseNotRun(f"needs a {kind} fault on {node}, and this run injects none: certify with "
                          "--inject-faults to write synthetic XID lines through a privileged pod on clusters "
                          "without their own fault injection (docs/fault-injection.md)")


class Env:
    """What every case needs: the API, the injector, the GPU nodes and timeouts."""

    def __init__(self, ctx: base.SuiteContext) -> None:
        inj = ctx.params.get("inject_fault")
        # without an injector the cases that need a fault are not run (the suite is incomplete);
        # the others (agents report, idle GPUs) still run
        self._inject: Injector = inj if callable(inj) else no_injection
        self._injected: set[str] = set()  # nodes with a fault this suite injected and has not cleared
        self.left_behind: dict[str, str] = {}  # node -> why its fault could not be cleared (a case's cleanup)
        self.ctx = ctx
        self.kube = kube_client.Kube(ctx.kubeconfig)
        self.ns = str(ctx.params.get("gpu_health_namespace", "gpu-health"))
        self.selector = str(ctx.params.get("node_selector", "nvidia.com/gpu.present=true"))
        nodes = self.kube.request("GET", "/api/v1/nodes", query={"labelSelector": self.selector})["items"]
        self.nodes = sorted(n["metadata"]["name"] for n in nodes)
        if len(self.nodes) < 4:
            raise base.CaseFailed(f"needs at least 4 GPU nodes ({self.selector}), found {len(self.nodes)}")

    def cycle(self, part: str) -> float:
        """Seconds between two passes of gpu-health's ``agent`` or ``controller``, as the bundle
        installed it (``bundle_values``), else the chart's default: an observation window of the
        suite is a number of these passes, so it fits a 1 s sim agent and a 10 s real one alike."""
        values = ((self.ctx.params.get("bundle_values") or {}).get("gpu-health") or {}).get(part) or {}
        seconds = values.get("intervalSeconds", CHART_INTERVALS[part])
        return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else CHART_INTERVALS[part]

    def back_in_service_s(self) -> float:
        """How long a drained node may take to be back in service: the controller's repair and
        verification timeouts as installed (a shorter wait would fail a case while gpu-health is
        still within its own bounds, as a loaded host's slow pod starts are), plus ten passes;
        at least 120 s."""
        values = ((self.ctx.params.get("bundle_values") or {}).get("gpu-health") or {}).get("controller") or {}
        total = 0.0
        for key, default in CHART_TIMEOUTS.items():
            v = values.get(key, default)
            total += float(v) if isinstance(v, int | float) and v > 0 else default
        return max(120.0, total + self.passes(10))

    def passes(self, n: int, part: str = "controller") -> float:
        """How long ``n`` passes of ``part`` take (at least 1 s: one API round trip per pass)."""
        return max(1.0, n * self.cycle(part))

    def node(self, name: str) -> dict[str, Any]:
        return self.kube.request("GET", f"/api/v1/nodes/{name}")

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.kube.request("PATCH", f"/api/v1/nodes/{name}", body, content_type="application/merge-patch+json")

    def wait_node(self, node: str, what: str, pred: Callable[[dict[str, Any]], bool], timeout: float) -> float:
        """Wait until ``pred`` holds for ``node``; a timeout names the node's last state."""
        last: dict[str, Any] = {}

        def probe() -> bool:
            last["node"] = self.node(node)
            return pred(last["node"])

        try:
            base.wait_for(f"{node}: {what}", probe, self.ctx.scaled(timeout))
        except base.WaitTimeout as exc:
            raise base.WaitTimeout(f"{exc} (last seen: {rc.describe(last['node'])})") from None
        return time.time()

    def ensure_healthy(self, node: str, timeout: float = 90) -> None:
        """Wait for ``node`` to be healthy; the breaker is reset so that one case's quarantines
        do not count against the next (only the breaker case tests the breaker)."""
        self.reset_breaker()
        self.wait_node(node, "healthy, schedulable, no fault condition", lambda n: (
            rc.state(n) == "healthy" and not rc.cordoned(n)
            and rc.condition(n, "GpuXidError").get("status") == "False"
            and rc.condition(n, "GpuMemoryError").get("status") == "False"
            and rc.condition(n, "InfinibandDegraded").get("status") == "False"), timeout)

    def events(self, node: str, reason: str, since: float) -> list[dict[str, Any]]:
        """Events ``reason`` about ``node`` that happened since ``since`` (the case's fault): a
        kept cluster still holds the Events of earlier runs, which prove nothing about this one."""
        items = self.kube.request("GET", "/api/v1/events", query={
            "fieldSelector": f"involvedObject.kind=Node,involvedObject.name={node},reason={reason}"})["items"]
        return rc.events_since(list(items), since)

    def breaker(self) -> dict[str, str]:
        cm = self.kube.request("GET", f"/api/v1/namespaces/{self.ns}/configmaps/{rc.BREAKER_CM}", ok404=True)
        return dict(cm.get("data") or {})

    def reset_breaker(self) -> None:
        """The deliberate human reset (as ``gpu-health breaker-reset`` does)."""
        path = f"/api/v1/namespaces/{self.ns}/configmaps/{rc.BREAKER_CM}"
        if self.kube.request("GET", path, ok404=True):
            self.kube.request("PATCH", path, {"data": {"status": "CLOSED", "entries": "", "trippedAt": "",
                                                        "trippedReason": ""}},
                              content_type="application/merge-patch+json")

    def forget_fault_history(self) -> list[str]:
        """Clear the flap history of every GPU node back in service, as a technician does after a
        maintenance window: on a kept cluster the faults of earlier runs would otherwise count
        against this run and send a node to hardware repair instead of a reboot. A node still in
        remediation keeps its history. Returns the nodes cleared."""
        cleared = []
        for name in self.nodes:
            n = self.node(name)
            if rc.FAULT_HISTORY in rc.annots(n) and rc.state(n) == "healthy" and not rc.cordoned(n):
                self.patch_node(name, {"metadata": {"annotations": {rc.FAULT_HISTORY: None}}})
                cleared.append(name)
        return cleared

    def inject(self, node: str, kind: str, **kw: Any) -> Any:
        """Inject a fault (CaseNotRun where this run's injector cannot)."""
        out = self._inject(node, kind, **kw)
        self._injected.add(node)
        return out

    def clear(self, node: str) -> None:
        """Clear the faults injected on ``node``, as a case's next step needs (CaseNotRun where the
        injector cannot: a real node's kernel log keeps a synthetic XID until the node's repair).
        Nothing to do for a node nothing was injected on."""
        if node in self._injected:
            self._inject(node, "clear")
            self._injected.discard(node)

    def cleanup(self, node: str) -> None:
        """``clear`` in a case's ``finally``: a fault that cannot be cleared is recorded in
        ``left_behind`` (the suite reports the case not run) and the rest of the cleanup goes on."""
        try:
            self.clear(node)
        except base.CaseNotRun as exc:
            self.left_behind[node] = str(exc)

    def release(self, node: str, timeout: float = 180) -> None:
        """Wait until ``node`` is back in service, resolving it as a technician would when
        gpu-health parked it for hardware repair or for a person (escalated)."""

        def back() -> bool:
            n = self.node(node)
            if rc.state(n) in ("hardware-repair", "escalated") and rc.RESOLVED not in rc.annots(n):
                self.patch_node(node, {"metadata": {"annotations": {rc.RESOLVED: "true"}}})
            return rc.state(n) == "healthy" and not rc.cordoned(n)

        base.wait_for(f"{node}: back in service", back, self.ctx.scaled(timeout))
