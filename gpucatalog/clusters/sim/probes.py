"""Readiness and liveness probes of sim-kubelet containers, as a kubelet runs them.

Called by the sim kubelet's poll loop (:mod:`.kubelet`): each running container with probes has a
:class:`ContainerProbes`; ``tick`` starts the probes that are due on a small thread pool (so a
slow probe never stalls the loop) and folds finished results into the probe's state with the
spec's ``initialDelaySeconds``, ``periodSeconds``, ``timeoutSeconds``, ``successThreshold`` and
``failureThreshold``. The kubelet reports a container Ready only while its readiness probe holds
(so a Deployment is available only when its pods answer), and kills a container whose liveness
probe failed ``failureThreshold`` times in a row (it is then restarted per restartPolicy).

Handlers: ``httpGet`` (HTTP or HTTPS without certificate check, as the kubelet; 200-399 is
success), ``tcpSocket`` (the connection opens) and ``exec`` (the command, run in the container's
mount and network namespaces and root, exits 0). HTTP and TCP probes dial the pod IP from
inside the pod's network namespace (:mod:`.netns`). ``startupProbe`` and ``grpc`` are not run.
"""

from __future__ import annotations

import dataclasses
import http.client
import socket
import ssl
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from gpucatalog.clusters.sim import netns, procs
from gpucatalog.core import errors, executor


@dataclass(frozen=True)
class Spec:
    """One probe of a container, its ports resolved."""

    kind: str  # http | tcp | exec
    port: int = 0
    host: str = ""
    path: str = "/"
    scheme: str = "HTTP"
    headers: tuple[tuple[str, str], ...] = ()
    command: tuple[str, ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


def _port(value: Any, container: Any) -> int:
    """A probe's port; a name the container does not declare is port 0, whose probe fails (as
    a kubelet's fails on an unknown port name at run time)."""
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    for p in container.ports or []:
        if p.name == value:
            return int(p.container_port)
    return 0


def parse(probe: Any, container: Any) -> Spec | None:
    """The ``Spec`` of a V1Probe (None when absent or of a kind not run here)."""
    spec = handler(probe, container)
    if spec is None:
        return None
    return dataclasses.replace(
        spec,
        initial_delay=float(probe.initial_delay_seconds or 0),
        period=float(probe.period_seconds or 10),
        timeout=float(probe.timeout_seconds or 1),
        success_threshold=int(probe.success_threshold or 1),
        failure_threshold=int(probe.failure_threshold or 3),
    )


def handler(probe: Any, container: Any) -> Spec | None:
    """The handler of a V1Probe or V1LifecycleHandler (a preStop hook) as a ``Spec`` with default
    timing (None when absent or of a kind not run here)."""
    if probe is None:
        return None
    if probe.http_get is not None:
        h = probe.http_get
        spec = Spec("http", _port(h.port, container), h.host or "", h.path or "/", (h.scheme or "HTTP").upper(),
                    tuple((x.name, x.value) for x in h.http_headers or []))
    elif probe.tcp_socket is not None:
        spec = Spec("tcp", _port(probe.tcp_socket.port, container), probe.tcp_socket.host or "")
    elif probe.var_exec is not None:
        spec = Spec("exec", command=tuple(probe.var_exec.command or []))
    else:
        return None
    return spec


def _connect(spec: Spec, ip: str, net: netns.PodNet | None) -> socket.socket:
    sock = netns.socket_in(net) if net is not None else socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(spec.timeout)
    try:
        sock.connect((spec.host or ip, spec.port))
    except OSError:
        sock.close()
        raise
    return sock


def run_once(spec: Spec, ip: str, net: netns.PodNet | None, pid: int) -> tuple[bool, str]:
    """Run the probe once; (succeeded, what was seen)."""
    try:
        if spec.kind == "exec":
            proc = executor.run(procs.enter_argv(pid, spec.command), env=procs.container_environ(pid), check=False,
                                timeout=spec.timeout)
            return proc.returncode == 0, f"exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-200:]}"
        sock = _connect(spec, ip, net)
        if spec.kind == "tcp":
            sock.close()
            return True, f"connected to {spec.port}"
        host = spec.host or ip
        conn = http.client.HTTPConnection(host, spec.port, timeout=spec.timeout)
        try:
            if spec.scheme == "HTTPS":
                ctx = ssl.create_default_context()
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # the kubelet does not verify either
                sock = ctx.wrap_socket(sock, server_hostname=host)
            conn.sock = sock
            conn.request("GET", spec.path, headers={"User-Agent": "kube-probe/sim", **dict(spec.headers)})
            with conn.getresponse() as resp:
                code = resp.status
        finally:
            conn.close()
            sock.close()
        return 200 <= code < 400, f"HTTP {code}"
    except (OSError, http.client.HTTPException, errors.ToolError) as exc:
        return False, str(exc) or type(exc).__name__


@dataclass
class State:
    """One probe's running state for one container instance."""

    spec: Spec
    started: float
    next_at: float = 0.0
    ok: bool = False  # the probe's current verdict (readiness: not ready until it succeeds)
    successes: int = 0
    failures: int = 0
    last: str = ""
    pending: Future[tuple[bool, str]] | None = None

    def fold(self, ok: bool, seen: str) -> None:
        self.last = seen
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= self.spec.success_threshold:
                self.ok = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= self.spec.failure_threshold:
                self.ok = False


@dataclass
class ContainerProbes:
    """The readiness and liveness probes of one container instance."""

    readiness: State | None = None
    liveness: State | None = None
    states: list[State] = field(default_factory=list)

    @classmethod
    def of(cls, container: Any, now: float) -> ContainerProbes:
        ready, live = parse(container.readiness_probe, container), parse(container.liveness_probe, container)
        # liveness holds until it fails: a container is alive from the start
        out = cls(State(ready, now) if ready else None, State(live, now, ok=True) if live else None)
        out.states = [s for s in (out.readiness, out.liveness) if s is not None]
        for s in out.states:
            s.next_at = now + s.spec.initial_delay
        return out

    @property
    def ready(self) -> bool:
        return self.readiness is None or self.readiness.ok

    @property
    def liveness_failed(self) -> str:
        """Why the container must be killed ('' while alive)."""
        lv = self.liveness
        if lv is None or lv.ok or lv.failures < lv.spec.failure_threshold:
            return ""
        return f"Liveness probe failed: {lv.last}"

    def tick(self, pool: ThreadPoolExecutor, ip: str, net: netns.PodNet | None, pid: int) -> bool:
        """Start due probes, fold finished ones; True when a verdict changed."""
        now = time.monotonic()
        changed = False
        for s in self.states:
            if s.pending is not None and s.pending.done():
                before = s.ok
                s.fold(*s.pending.result())
                s.pending = None
                changed |= s.ok != before
            if s.pending is None and now >= s.next_at:
                s.next_at = now + s.spec.period
                s.pending = pool.submit(run_once, s.spec, ip, net, pid)
        return changed
