"""The one place gpu-catalog runs external commands (helm, kubectl, go, slurm tools …).

Argument lists only, never shell strings, so user input can never be interpreted by a shell.
``subprocess`` is banned everywhere else by a lint rule (ruff TID251); gpu-health, its own image,
has its twin in ``gpuhealth/hostexec.py``.
With ``--debug`` every command is echoed as ``>>> helm template …`` on stderr. A failure raises
:class:`ToolError` carrying the command and its stderr.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

from gpucatalog.core import errors

DEBUG = os.environ.get("CATALOG_DEBUG", "") not in ("", "0")

# A started long-running process (from ``spawn``) and the error ``Process.wait(timeout=…)`` raises,
# named here so supervisors need not import subprocess.
Process = subprocess.Popen[bytes]
TimeoutExpired = subprocess.TimeoutExpired


def set_debug(on: bool) -> None:
    global DEBUG
    DEBUG = on


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    input: str | bytes | None = None,
    check: bool = True,
    timeout: float | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion and capture its output.

    ``env`` is added to the current environment. Raises ``ToolError`` when ``check`` and the
    command exits non-zero, or when it cannot be started.
    """
    args = [os.fspath(a) for a in argv]
    if DEBUG:
        print(">>> " + " ".join(args), file=sys.stderr)
    full_env = None
    if env is not None:
        full_env = dict(os.environ)
        full_env.update(env)
    data: str | bytes | None = input
    try:
        proc = subprocess.run(
            args,
            cwd=cwd,
            env=full_env,
            input=data,
            capture_output=True,
            text=text,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise errors.ToolError(args, 127, f"executable not found: {exc.filename}") from exc
    except PermissionError as exc:
        raise errors.ToolError(args, 126, f"not executable: {exc.filename}") from exc
    except subprocess.TimeoutExpired as exc:
        raise errors.ToolError(args, 124, f"timed out after {timeout}s") from exc
    if check and proc.returncode != 0:
        raise errors.ToolError(args, proc.returncode, proc.stderr or proc.stdout or "")
    return proc


def output_bytes(argv: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str] | None = None,
                 timeout: float | None = None) -> bytes:
    """Run ``argv`` and return its stdout undecoded (an archive stream); fails as :func:`run` does."""
    proc = run(argv, env=env, timeout=timeout, text=False, check=False)
    if proc.returncode != 0:
        stderr = cast(bytes, proc.stderr).decode(errors="replace")
        raise errors.ToolError([os.fspath(a) for a in argv], proc.returncode, stderr)
    return cast(bytes, proc.stdout)


def spawn(
    argv: Sequence[str | os.PathLike[str]],
    *,
    log_path: Path,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    new_session: bool = True,
    pass_fds: Sequence[int] = (),
) -> Process:
    """Start a long-running process with stdout+stderr appended to ``log_path``.

    ``new_session`` puts it in its own process group so a supervisor can kill the whole tree;
    ``pass_fds`` stay open in it (everything else of ours is closed).
    """
    args = [os.fspath(a) for a in argv]
    if DEBUG:
        print(">>> " + " ".join(args) + f"  (log: {log_path})", file=sys.stderr)
    full_env = dict(os.environ)
    if env is not None:
        full_env.update(env)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        try:
            return subprocess.Popen(
                args,
                cwd=cwd,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=new_session,
                pass_fds=tuple(pass_fds),
            )
        except FileNotFoundError as exc:
            raise errors.ToolError(args, 127, f"executable not found: {exc.filename}") from exc
        except PermissionError as exc:
            raise errors.ToolError(args, 126, f"not executable: {exc.filename}") from exc


def piped(argv: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str], stdin: bool,
          merge_stderr: bool) -> Process:
    """Start ``argv`` with its output on pipes for the caller to stream (stdout, and stderr apart
    unless ``merge_stderr``), stdin a pipe or closed, in exactly the environment ``env`` (not
    added to ours: a command run inside a container gets the container's)."""
    args = [os.fspath(a) for a in argv]
    if DEBUG:
        print(">>> " + " ".join(args), file=sys.stderr)
    try:
        return subprocess.Popen(args, env=dict(env), stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE)
    except FileNotFoundError as exc:
        raise errors.ToolError(args, 127, f"executable not found: {exc.filename}") from exc
    except PermissionError as exc:
        raise errors.ToolError(args, 126, f"not executable: {exc.filename}") from exc


def probe(argv: Sequence[str | os.PathLike[str]], *, timeout: float, cap: int) -> tuple[int | None, bytes]:
    """Run an untrusted program briefly (a version question to a user's binary): its own process
    group, stdin closed, stdout+stderr read up to ``cap`` bytes for at most ``timeout`` seconds,
    then the whole group killed, so neither a flood of output, a hang nor a child left holding
    the pipe costs more than that. Returns (exit status, None when it had not exited; output)."""
    args = [os.fspath(a) for a in argv]
    if DEBUG:
        print(">>> " + " ".join(args), file=sys.stderr)
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except FileNotFoundError as exc:
        raise errors.ToolError(args, 127, f"executable not found: {exc.filename}") from exc
    except PermissionError as exc:
        raise errors.ToolError(args, 126, f"not executable: {exc.filename}") from exc
    assert proc.stdout is not None
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while len(out) < cap and (left := deadline - time.monotonic()) > 0:
                if not sel.select(min(left, 0.1)):
                    if proc.poll() is not None:
                        break  # it exited: a child of it still holding the pipe is not waited for
                    continue
                chunk = os.read(proc.stdout.fileno(), min(1 << 16, cap - len(out)))
                if not chunk:
                    break
                out += chunk
    finally:
        code = proc.poll()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.stdout.close()
        proc.wait()
    return code, bytes(out)
