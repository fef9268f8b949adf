"""The per-cluster supervisor daemon: starts, watches, restarts and stops every process.

``cluster.up`` spawns ``python -m gpucatalog.clusters.sim.supervisor --state DIR`` in
its own session and waits for ``state.json`` to say ``running`` (or ``failed``). The daemon
starts the components of ``controlplane`` phase by phase (etcd, then the API server, then the
rest), each in its own process group with its own log file and pid file, probes their health,
restarts exited ones per the cluster's restart policy (with back-off and a cap), and on SIGTERM
stops them in reverse order (the sim kubelet first, so it can end its pod processes) and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from gpucatalog.clusters.sim import pki as pki_mod
from gpucatalog.clusters.sim import procs
from gpucatalog.clusters.sim.config import ClusterConfig
from gpucatalog.clusters.sim.controlplane import Component, components
from gpucatalog.clusters.sim.layout import Layout
from gpucatalog.core import errors, executor

PHASE_TIMEOUT_S = {"storage": 30.0, "api": 90.0}
HEALTH_EVERY_S = 2.0


@dataclass
class Proc:
    comp: Component
    popen: executor.Process | None = None
    restarts: int = 0
    exit_code: int | None = None
    status: str = "pending"
    healthy: bool | None = None
    next_start: float = 0.0


def probe(url: str, lay: Layout) -> tuple[bool, bool]:
    """(serving, healthy) for an HTTP(S) health URL; client cert is the admin identity."""
    ctx: ssl.SSLContext | None = None
    if url.startswith("https://"):
        p = pki_mod.Pki(lay.pki)
        ctx = ssl.create_default_context(cafile=str(p.ca_crt))
        ctx.check_hostname = False  # kcm/scheduler serve self-signed certs for their own names
        ctx.verify_mode = ssl.CERT_NONE if "/healthz" in url else ssl.CERT_REQUIRED
        ctx.load_cert_chain(str(p.crt("admin")), str(p.key("admin")))
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as r:
            return True, r.status == 200
    except urllib.error.HTTPError:
        return True, False
    except (urllib.error.URLError, OSError):
        return False, False


class Supervisor:
    def __init__(self, cfg: ClusterConfig, lay: Layout) -> None:
        self.cfg = cfg
        self.lay = lay
        self.procs = [Proc(c) for c in components(cfg, lay)]
        self.phase = "starting"
        self.error = ""
        self.stopping = False
        self._last_health = 0.0

    # -- state file -------------------------------------------------------------------------
    def write_state(self) -> None:
        doc = {
            "phase": self.phase,
            "error": self.error,
            "supervisor": {"pid": _self_pid()},
            "updated": time.time(),
            "components": {
                p.comp.name: {
                    "pid": p.popen.pid if p.popen else None,
                    "status": p.status,
                    "restarts": p.restarts,
                    "exit_code": p.exit_code,
                    "healthy": p.healthy,
                    "log": str(self.lay.logs / f"{p.comp.name}.log"),
                }
                for p in self.procs
            },
        }
        tmp = self.lay.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2))
        tmp.replace(self.lay.state)

    # -- processes --------------------------------------------------------------------------
    def start(self, p: Proc) -> None:
        log = self.lay.logs / f"{p.comp.name}.log"
        with open(log, "ab") as fh:
            fh.write(f"--- supervisor: start {p.comp.name} (restart {p.restarts}) at {time.ctime()}\n".encode())
        p.popen = executor.spawn(p.comp.argv, log_path=log, env=p.comp.env)
        procs.record(self.lay.pids, p.comp.name, p.popen.pid)
        p.status, p.exit_code, p.healthy = "running", None, None

    def wait_healthy(self, group: list[Proc], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.stopping:
                raise errors.ToolError(["supervisor"], 130, "stopped during start")
            pending = []
            for p in group:
                assert p.popen is not None
                if p.popen.poll() is not None:
                    raise errors.ToolError(
                        p.comp.argv[:1], p.popen.returncode,
                        f"{p.comp.name} exited during start:\n" + _tail(self.lay.logs / f"{p.comp.name}.log"),
                    )
                if p.comp.health:
                    p.healthy = probe(p.comp.health, self.lay)[1]
                    if not p.healthy:
                        pending.append(p)
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(p.comp.name for p in pending)
                raise errors.ToolError(["supervisor"], 124, f"not healthy after {timeout:.0f}s: {names}")
            time.sleep(0.1)

    def boot(self) -> None:
        for phase in ("storage", "api", "rest"):
            group = [p for p in self.procs if p.comp.phase == phase]
            for p in group:
                self.start(p)
            self.write_state()
            if phase in PHASE_TIMEOUT_S:
                self.wait_healthy(group, PHASE_TIMEOUT_S[phase])
        self.phase = "running"
        self.write_state()

    def tick(self) -> None:
        now = time.monotonic()
        changed = False
        for p in self.procs:
            if p.popen is not None and p.status == "running" and p.popen.poll() is not None:
                p.exit_code = p.popen.returncode
                p.healthy = False
                changed = True
                policy = self.cfg.restart
                restart = policy == "always" or (policy == "on-failure" and p.exit_code != 0)
                if restart and p.restarts < self.cfg.max_restarts:
                    p.status = "backoff"
                    p.next_start = now + min(0.5 * 2**p.restarts, 10.0)
                else:
                    p.status = "exited"
                _log(self.lay, f"{p.comp.name} exited with {p.exit_code}; now {p.status}")
            if p.status == "backoff" and now >= p.next_start:
                p.restarts += 1
                self.start(p)
                changed = True
        if now - self._last_health > HEALTH_EVERY_S:
            self._last_health = now
            for p in self.procs:
                if p.status == "running" and p.comp.health:
                    h = probe(p.comp.health, self.lay)[1]
                    changed = changed or h != p.healthy
                    p.healthy = h
            changed = True  # refresh "updated" so readers can tell the supervisor is alive
        if changed:
            self.write_state()

    def shutdown(self) -> None:
        self.phase = "stopping"
        self.write_state()
        for p in reversed(self.procs):
            if p.popen is None:
                continue
            rec = procs.read(self.lay.pids / f"{p.comp.name}.pid")
            # the kubelet gets longer: it stops its pod processes first
            grace = 10.0 if p.comp.name == "sim-kubelet" else 5.0
            if rec is not None:
                procs.stop([rec], grace=grace)
            if p.popen.poll() is None:
                p.popen.kill()
            p.popen.wait()
            p.status = "stopped"
            (self.lay.pids / f"{p.comp.name}.pid").unlink(missing_ok=True)
        self.phase = "stopped"
        self.write_state()

    def run(self) -> int:
        rc = 0
        try:
            self.boot()
            while not self.stopping:
                self.tick()
                time.sleep(0.2)
        except errors.CatalogError as err:
            self.phase, self.error = "failed", str(err)
            _log(self.lay, f"start failed: {err}")
            self.write_state()
            rc = 1
        finally:
            failed = self.phase == "failed"
            self.shutdown()
            if failed:
                self.phase = "failed"
                self.write_state()
        return rc


def _self_pid() -> int:
    return os.getpid()


def _log(lay: Layout, msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sim-supervisor")
    ap.add_argument("--state", required=True, type=Path)
    ap.add_argument("--daemonize", action="store_true", help="fork, detach (new session) and record own pid")
    args = ap.parse_args(argv)
    lay = Layout(args.state)
    if args.daemonize:
        # The launcher exits at once (its starter reaps it); the daemon is re-parented to init,
        # so it never lingers as a zombie of a long-lived caller such as pytest.
        if os.fork() > 0:
            os._exit(0)
        os.setsid()
        procs.record(lay.pids, "supervisor", os.getpid())
    cfg = ClusterConfig.load(lay.config)
    sup = Supervisor(cfg, lay)

    def on_signal(_sig: int, _frame: FrameType | None) -> None:
        sup.stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())
