"""Start, watch and record the daemons of one local Slurm cluster.

Every process is started through the executor in its own session with a marker in its
environment, and recorded (pid and kernel start time) in ``<state>/pids.json`` as it starts,
so :mod:`.cleanup` can find and kill all of them — also from another process after a crash.
Called by :mod:`.cluster`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.core import errors, executor

MARKER = "GPUCATALOG_SLURM_ROOT"


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/<pid>/stat), to detect pid reuse."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields after the last ')' are fixed.
    return raw.rsplit(")", 1)[1].split()[19]


@dataclass
class Daemon:
    name: str
    proc: executor.Process
    log: Path


class Supervisor:
    def __init__(self, layout: Layout, env: Mapping[str, str]) -> None:
        self.layout = layout
        self.env = {**env, MARKER: str(layout.root)}
        self.daemons: list[Daemon] = []

    def start(self, name: str, argv: Sequence[str], log: Path) -> Daemon:
        proc = executor.spawn(argv, log_path=log, env=self.env)
        d = Daemon(name=name, proc=proc, log=log)
        self.daemons.append(d)
        self._record()
        return d

    def _record(self) -> None:
        rows = [{"name": d.name, "pid": d.proc.pid, "start": start_time(d.proc.pid)} for d in self.daemons]
        tmp = self.layout.pids.with_suffix(".tmp")
        tmp.write_text(json.dumps(rows, indent=1))
        os.replace(tmp, self.layout.pids)

    def reap(self, timeout: float = 10.0) -> None:
        """Collect the exit status of every started process (after cleanup killed them)."""
        for d in self.daemons:
            try:
                d.proc.wait(timeout=timeout)
            except executor.TimeoutExpired:
                d.proc.kill()
                d.proc.wait()

    def dead(self) -> list[Daemon]:
        return [d for d in self.daemons if d.proc.poll() is not None]

    def check(self) -> None:
        """Raise if any daemon exited: which one, its exit code and the end of its log."""
        for d in self.dead():
            raise errors.ToolError([d.name], d.proc.returncode or 0, log_tail(d.log))


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"
