"""Stop every process of a local Slurm cluster and remove its state folder, even after a crash.

Works from the state folder alone: the processes recorded in ``pids.json`` (checked against
their kernel start time so a reused pid is never killed) plus any process whose environment
carries the cluster's marker or ``SLURM_CONF`` — slurmstepd and job processes, which survive a
killed slurmd. Jobs are not cancelled one by one: their processes are killed with the rest.
Called by :meth:`.cluster.SlurmCluster.stop`, by the sim provider's ``down`` and by tests.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

from gpucatalog.clusters.slurm import processes
from gpucatalog.clusters.slurm.layout import Layout


def _recorded(layout: Layout) -> set[int]:
    try:
        rows = json.loads(layout.pids.read_text())
    except (OSError, ValueError):
        return set()
    pids: set[int] = set()
    for row in rows:
        pid = int(row["pid"])
        if row.get("start") and processes.start_time(pid) == row["start"]:
            pids.add(pid)
    return pids


def _ancestors() -> set[int]:
    pids = {os.getpid()}
    pid = os.getpid()
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        pids.add(pid)
    return pids


def _marked(layout: Layout) -> set[int]:
    """Processes whose environment names this cluster (daemons, slurmstepd, job steps)."""
    markers = (
        f"{processes.MARKER}={layout.root}".encode(),
        f"SLURM_CONF={layout.slurm_conf}".encode(),
    )
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(m in env for m in markers):
            found.add(int(entry.name))
    return found - _ancestors()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purpose (its parent reaps it).
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _signal(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_all(layout: Layout, grace: float = 5.0) -> list[int]:
    """TERM every process of the cluster, KILL what is left after ``grace`` s; returns the pids."""
    targets = _recorded(layout) | _marked(layout)
    _signal(targets, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in targets):
        time.sleep(0.05)
    # Kill anything new too (a slurmstepd forked during shutdown).
    leftover = {p for p in targets if _alive(p)} | _marked(layout)
    _signal(leftover, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in leftover):
        time.sleep(0.05)
    return sorted(targets | leftover)


def remove(layout: Layout) -> None:
    """Kill everything, then delete the state folder (spool, state save, logs, devices, DB)."""
    kill_all(layout)
    shutil.rmtree(layout.root, ignore_errors=True)
