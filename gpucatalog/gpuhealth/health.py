"""Liveness and readiness of the agent and the controller, served over HTTP for kubelet probes.

* ``GET /healthz`` (liveness): the work loop finished an iteration within ``stale_after_s``,
  whatever its outcome. An API server outage must not make the kubelet restart every agent of
  the cluster at once; a loop that hangs (a stuck probe, a deadlock) must.
* ``GET /readyz`` (readiness): the last iteration reached the API server (the agent wrote its
  conditions; the controller ran its leader election and, as leader, its reconcile pass) and that
  was within ``stale_after_s``.

Both answer ``200 ok`` or ``503 <why>``; anything else is 404. The server binds the address it is
given (the chart passes the pod's own IP; the default is loopback) on a daemon thread
(:mod:`httpd`), so the loop never waits for it. Called by ``main agent`` and ``main controller``; the loops call
:meth:`Health.beat` once per iteration.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpucatalog.gpuhealth import httpd

LIVE_PATH = "/healthz"
READY_PATH = "/readyz"


class Health:
    """What the probes report. A fresh process counts as alive for one ``stale_after_s`` (its
    first iteration may take that long) and as not ready until an iteration reached the API."""

    def __init__(self, stale_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stale_after_s = stale_after_s
        self.clock = clock
        self.started = clock()
        self.last_beat: float | None = None
        self.last_ok: float | None = None
        self.last_error = ""
        self.iterations = 0

    def beat(self, ok: bool, error: str = "") -> None:
        now = self.clock()
        self.iterations += 1
        self.last_beat = now
        if ok:
            self.last_ok = now
            self.last_error = ""
        else:
            self.last_error = error[:300]

    def live(self) -> tuple[bool, str]:
        since = self.clock() - (self.last_beat if self.last_beat is not None else self.started)
        if since <= self.stale_after_s:
            return True, "ok"
        what = "no loop iteration finished" if self.last_beat is None else "the last loop iteration finished"
        return False, f"{what} {since:.0f}s ago (limit {self.stale_after_s:g}s)"

    def ready(self) -> tuple[bool, str]:
        if self.last_ok is None:
            why = f": {self.last_error}" if self.last_error else ""
            return False, f"no iteration has reached the API server yet{why}"
        since = self.clock() - self.last_ok
        if since > self.stale_after_s:
            return False, f"the API server was last reached {since:.0f}s ago: {self.last_error or 'loop stalled'}"
        return True, "ok"


def parse_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8081`` or a bare IPv6 pod IP ``fd00::5:8081``) -> (host, port)."""
    return httpd.parse_addr(text, "--health-addr")


def _answer(check: Callable[[], tuple[bool, str]]) -> httpd.Route:
    def route() -> httpd.Answer:
        ok, why = check()
        return httpd.text(200 if ok else 503, why + "\n")
    return route


def serve(health: Health, addr: str) -> httpd.Server:
    """Start answering probes on ``addr`` in a daemon thread; the caller may ``shutdown()`` it."""
    return httpd.serve(addr, "--health-addr", {LIVE_PATH: _answer(health.live), READY_PATH: _answer(health.ready)},
                       name="health")
