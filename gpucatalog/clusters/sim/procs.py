"""Pid files and safe process-group termination for everything a sim cluster starts.

Every process is started in its own session (``executor.spawn``), so its pid is also its
process-group id and killing the group takes its children too. A pid file records the pid and
the process start time (``/proc/<pid>/stat`` field 22): a recycled pid never matches, so
``down`` after a crash only ever signals processes this cluster started. Used by the
supervisor, the sim kubelet and ``cluster.down``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


def start_ticks(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may hold spaces; fields after the closing paren are fixed.
    rest = raw[raw.rindex(")") + 2 :].split()
    return int(rest[19])


def container_environ(pid: int) -> dict[str, str]:
    """The environment of the container whose process is ``pid`` (OSError once it is gone)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode(errors="replace").partition("=")[::2] for e in raw if b"=" in e)


def enter_argv(pid: int, command: Sequence[str], nsenter: str = "nsenter") -> list[str]:
    """argv that runs ``command`` inside the container whose process is ``pid``: its mount and
    network namespaces, its root and working directory, as a runtime runs an exec probe, a
    preStop hook or ``kubectl exec`` (with ``container_environ`` as its environment)."""
    return [nsenter, "-t", str(pid), "-m", "-n", "-r", "-w", "--", *command]


@dataclass(frozen=True)
class PidRecord:
    name: str
    pid: int
    ticks: int

    def alive(self) -> bool:
        if start_ticks(self.pid) != self.ticks:
            return False
        try:
            state = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"


def record(pid_dir: Path, name: str, pid: int) -> PidRecord | None:
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    rec = PidRecord(name, pid, ticks)
    pid_dir.mkdir(parents=True, exist_ok=True)
    tmp = pid_dir / f".{name}.pid.tmp"
    tmp.write_text(json.dumps({"name": name, "pid": pid, "ticks": ticks}))
    tmp.replace(pid_dir / f"{name}.pid")
    return rec


def read(path: Path) -> PidRecord | None:
    try:
        d = json.loads(path.read_text())
        return PidRecord(str(d["name"]), int(d["pid"]), int(d["ticks"]))
    except (OSError, ValueError, KeyError):
        return None


def read_all(pid_dir: Path) -> list[PidRecord]:
    if not pid_dir.is_dir():
        return []
    recs = [read(p) for p in sorted(pid_dir.glob("*.pid"))]
    return [r for r in recs if r is not None]


def signal_group(rec: PidRecord, sig: int) -> None:
    if not rec.alive():
        return
    try:
        os.killpg(rec.pid, sig)
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(rec.pid, sig)


def stop(recs: list[PidRecord], grace: float = 5.0) -> None:
    """SIGTERM each live record's group, wait up to ``grace`` seconds, then SIGKILL the rest."""
    live = [r for r in recs if r.alive()]
    for r in live:
        signal_group(r, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while live and time.monotonic() < deadline:
        _reap()
        live = [r for r in live if r.alive()]
        if live:
            time.sleep(0.05)
    for r in live:
        signal_group(r, signal.SIGKILL)
    # wait for SIGKILLed processes to disappear so a following `up` finds free ports
    deadline = time.monotonic() + 5
    while live and time.monotonic() < deadline:
        _reap()
        live = [r for r in live if r.alive()]
        if live:
            time.sleep(0.05)


def _reap() -> None:
    """Collect exited children of this process (they would otherwise linger as zombies)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def read_all_pods(nodes_dir: Path) -> list[PidRecord]:
    """Pid records of sim-kubelet pod processes (``<node>/pods/<pod>/<container>.pid``)."""
    if not nodes_dir.is_dir():
        return []
    recs = [read(p) for p in nodes_dir.glob("*/pods/*/*.pid")]
    return [r for r in recs if r is not None]


@dataclass(frozen=True)
class Usage:
    rss: int  # bytes resident
    pss: int  # bytes, shared pages divided among their users
    cpu_s: float  # user + system time, including reaped children's


def usage(sessions: set[int]) -> Usage:
    """What every process in ``sessions`` (session ids: the pids of recorded processes) uses
    now. Read by the benchmarks (``bench/cluster_start.py``, ``bench/sim_pods.py``)."""
    rss = pss = 0
    cpu = 0.0
    page, ticks = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) not in sessions:  # field 6: session id
                continue
            cpu += sum(int(f) for f in fields[11:15]) / ticks  # utime stime cutime cstime
            rss += int((d / "statm").read_text().split()[1]) * page
            for line in (d / "smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            continue  # a process that ended while being read
    return Usage(rss, pss, cpu)

