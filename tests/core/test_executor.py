"""The one command runner: argv lists, captured output, and every way a program can fail to run
turned into a ToolError that names the command (never an OSError traceback)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpucatalog.core import errors, executor


def test_runs_argv_and_captures_output() -> None:
    proc = executor.run([sys.executable, "-c", "import sys; print(sys.argv[1])", "a b; rm -rf /"])
    assert proc.stdout == "a b; rm -rf /\n"  # one argument, never a shell


def test_nonzero_exit_carries_command_and_stderr() -> None:
    with pytest.raises(errors.ToolError) as exc:
        executor.run([sys.executable, "-c", "import sys; sys.exit('boom')"])
    assert exc.value.returncode == 1 and "boom" in str(exc.value) and sys.executable in str(exc.value)


def test_missing_program_is_a_tool_error(tmp_path: Path) -> None:
    with pytest.raises(errors.ToolError, match="executable not found") as exc:
        executor.run([tmp_path / "nope"])
    assert exc.value.returncode == 127


@pytest.mark.parametrize("start", [executor.run, lambda argv: executor.spawn(argv, log_path=Path("/dev/null"))])
def test_non_executable_program_is_a_tool_error(tmp_path: Path, start: object) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o644)
    with pytest.raises(errors.ToolError, match="not executable") as exc:
        start([tool])  # type: ignore[operator]
    assert exc.value.returncode == 126


def test_timeout_is_a_tool_error() -> None:
    with pytest.raises(errors.ToolError, match="timed out after 0.2s"):
        executor.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)


def test_debug_echoes_the_command(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "DEBUG", True)
    executor.run([sys.executable, "-c", "pass"])
    assert capsys.readouterr().err.startswith(f">>> {sys.executable} -c pass")
