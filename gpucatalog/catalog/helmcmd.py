"""pyhelm3's Helm command, run without a shell.

pyhelm3 starts Helm through ``sh -c`` with a joined command line, so cancelling its task signals
the shell and leaves Helm running on until its own ``--timeout``. Here Helm is the direct child:
cancelling an install (``install`` does when a component's pods crash-loop) sends SIGTERM to Helm
itself, which cancels its wait and records the release as failed, as on Ctrl-C.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pyhelm3
import pyhelm3.errors


class Command(pyhelm3.Command):  # type: ignore[misc]
    def __init__(self, executable: str, kubeconfig: Any = None) -> None:
        super().__init__(executable=executable, kubeconfig=kubeconfig)
        self._argv_tail = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []

    async def run(self, command: list[Any], input: bytes | None = None) -> bytes:
        argv = [self._executable, *(str(part) for part in command), *self._argv_tail]
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if input is not None else None,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            stdout, stderr = await proc.communicate(input)
        except asyncio.CancelledError:
            try:
                proc.terminate()  # Helm's own SIGTERM handler marks the release failed, then exits
            except ProcessLookupError:
                pass
            await proc.wait()
            raise
        if proc.returncode == 0:
            return stdout
        text = stderr.decode(errors="replace").lower()
        if "release: not found" in text:
            raise pyhelm3.errors.ReleaseNotFoundError(proc.returncode, stdout, stderr)
        if "context canceled" in text:
            raise pyhelm3.errors.CommandCancelledError(proc.returncode, stdout, stderr)
        raise pyhelm3.errors.Error(proc.returncode, stdout, stderr)
