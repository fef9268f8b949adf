"""Cleanup finds a cluster's processes from its state folder alone, and never a reused pid."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from gpucatalog.clusters.slurm import cleanup, processes
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.core import executor


def test_recorded_pid_with_other_start_time_is_not_killed(tmp_path: Path) -> None:
    lay = Layout(tmp_path)
    lay.pids.write_text(json.dumps([{"name": "slurmctld", "pid": os.getpid(), "start": "1"}]))
    assert cleanup._recorded(lay) == set()


def test_recorded_and_marked_processes_are_killed(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "c")
    lay.root.mkdir()
    sup = processes.Supervisor(lay, {})
    recorded = sup.start("sleeper", ["sleep", "60"], tmp_path / "a.log")
    # A process the cluster did not start itself but that carries its SLURM_CONF (a job step).
    stray = executor.spawn(["sleep", "60"], log_path=tmp_path / "b.log", env={"SLURM_CONF": str(lay.slurm_conf)})
    unrelated = executor.spawn(["sleep", "60"], log_path=tmp_path / "c.log")
    try:
        time.sleep(0.1)
        killed = cleanup.kill_all(lay, grace=2)
        assert {recorded.proc.pid, stray.pid} <= set(killed)
        assert unrelated.pid not in killed
        assert recorded.proc.wait(5) != 0 and stray.wait(5) != 0
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()
        sup.reap()
