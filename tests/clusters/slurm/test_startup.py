"""The start steps the sim's Slurm and kind's Slurm pods share (gpucatalog.clusters.slurm.startup):
the waits end on the event they wait for, a daemon's exit, or their timeout naming what was awaited."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpucatalog.clusters.slurm import startup
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.clusters.slurm.processes import Supervisor
from gpucatalog.core import errors


def _sup(tmp_path: Path) -> Supervisor:
    lay = Layout(tmp_path / "slurm")
    for folder in lay.folders():
        folder.mkdir(parents=True, exist_ok=True)
    return Supervisor(lay, {})


def test_a_wait_ends_when_its_probe_holds(tmp_path: Path) -> None:
    answers = iter([False, False, True])
    startup.wait(_sup(tmp_path), "the third answer", lambda: next(answers), timeout=30, interval=0)
    assert next(answers, None) is None


def test_a_daemon_that_exits_ends_the_wait_with_its_log(tmp_path: Path) -> None:
    sup = _sup(tmp_path)
    d = sup.start("munged", ["sh", "-c", "echo key unreadable; exit 3"], sup.layout.log / "munged.out")
    d.proc.wait()
    with pytest.raises(errors.ToolError, match="key unreadable") as exc:
        startup.wait(sup, "munged's socket", lambda: False, timeout=30)
    assert exc.value.returncode == 3
    sup.reap()


def test_a_timeout_names_what_was_awaited_and_the_last_daemon_log(tmp_path: Path) -> None:
    sup = _sup(tmp_path)
    sup.start("slurmdbd", ["sh", "-c", "echo waiting for the database; exec sleep 30"], sup.layout.log / "slurmdbd.out")
    try:
        with pytest.raises(errors.ToolError, match=r"(?s)waiting for slurmdbd to accept sacctmgr.*waiting for the database"):
            startup.wait(sup, "slurmdbd to accept sacctmgr", lambda: False, timeout=0.5)
    finally:
        for d in sup.daemons:
            d.proc.kill()
        sup.reap()


def test_node_states_reads_sinfo_and_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin" / "sinfo"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\n[ -n "$FAIL" ] && { echo "slurm_load_node error: Unable to contact slurm controller" >&2; exit 1; }\n'
                    'printf "gc-worker idle\\ngc-worker2 drained\\n\\ngc-worker3 inval\\n"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    states, error = startup.node_states({})
    assert states == {"gc-worker": "idle", "gc-worker2": "drained", "gc-worker3": "inval"} and error == ""
    assert startup.unusable(states) == ["gc-worker2", "gc-worker3"]
    assert startup.unusable({"a": "idle", "b": "mixed", "c": "down"}) == []
    states, error = startup.node_states({"FAIL": "1"})
    assert states == {} and error == "slurm_load_node error: Unable to contact slurm controller"
