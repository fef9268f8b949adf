"""Liveness and readiness of the agent and the controller, served over HTTP for kubelet probes.

* ``GET /healthz`` (liveness): the work loop finished an iteration within ``stale_after_s``,
  whatever its outcome. An API server outage must not make the kubelet restart every agent of
  the cluster at once; a loop that hangs (a stuck probe, a deadlock) must.
* ``GET /readyz`` (readiness): the last iteration reached the API server (the agent wrote its
  conditions; the controller ran its leader election and, as leader, its reconcile pass) and that
  was within ``stale_after_s``.

Both answer ``200 ok`` or ``503 <why>``; anything else is 404. The server binds the address it is
given (the chart passes the pod's own IP; the default is loopback) on a daemon thread, so the
loop never waits for it. Called by ``main agent`` and ``main controller``; the loops call
:meth:`Health.beat` once per iteration.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gpucatalog.gpuhealth.errors import ConfigError

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
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--health-addr {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8081")
    return host, int(port)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    health: Health


class _V6Server(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.path == LIVE_PATH:
            ok, why = self.server.health.live()
        elif self.path == READY_PATH:
            ok, why = self.server.health.ready()
        else:
            self._answer(404, "not found; try /healthz or /readyz")
            return
        self._answer(200 if ok else 503, why)

    def _answer(self, code: int, text: str) -> None:
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return  # a probe every few seconds is not worth a log line


def serve(health: Health, addr: str) -> _Server:
    """Start answering probes on ``addr`` in a daemon thread; the caller may ``shutdown()`` it."""
    host, port = parse_addr(addr)
    cls = _V6Server if ":" in host else _Server
    try:
        server = cls((host, port), _Handler)
    except OSError as exc:
        raise ConfigError(f"--health-addr {addr}: cannot listen there ({exc.strerror or exc})") from exc
    server.health = health
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
