"""The one command runner: argv lists, captured output, and every way a program can fail to run
turned into a ToolError that names the command (never an OSError traceback)."""

from __future__ import annotations

import sys
import time
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


def test_output_bytes_keeps_stdout_undecoded_and_fails_like_run() -> None:
    raw = executor.output_bytes([sys.executable, "-c", "import sys; sys.stdout.buffer.write(bytes([0, 255, 10]))"])
    assert raw == b"\x00\xff\n"
    with pytest.raises(errors.ToolError) as exc:
        executor.output_bytes([sys.executable, "-c", "import sys; sys.stderr.buffer.write(b'bad \\xff'); sys.exit(3)"])
    assert exc.value.returncode == 3 and "bad \ufffd" in str(exc.value)


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


def _gone(pid: int) -> bool:
    """``pid`` ends within seconds of a SIGKILL (a zombie left for init to reap counts as ended)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_probe_caps_output_of_a_flood() -> None:
    t0 = time.monotonic()
    code, out = executor.probe([sys.executable, "-c", "import sys\nwhile True: sys.stdout.write('x' * 65536)"],
                               timeout=20, cap=1000)
    assert len(out) == 1000 and code is None and time.monotonic() - t0 < 10


def test_probe_does_not_wait_for_a_child_holding_stdout_and_kills_it(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    script = ("import subprocess, sys\n"
              "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
              f"open({str(pidfile)!r}, 'w').write(str(c.pid))\nprint('v1.2.3', flush=True)\n")
    t0 = time.monotonic()
    code, out = executor.probe([sys.executable, "-c", script], timeout=20, cap=1 << 16)
    assert time.monotonic() - t0 < 10
    assert code == 0 and out.decode().strip() == "v1.2.3"
    assert _gone(int(pidfile.read_text()))  # its whole process group was killed


def test_probe_time_limit_kills_the_group() -> None:
    t0 = time.monotonic()
    code, out = executor.probe([sys.executable, "-c", "import time; time.sleep(300)"], timeout=0.5, cap=100)
    assert code is None and out == b"" and time.monotonic() - t0 < 5
