"""The one place gpu-health runs external commands (``nvidia-smi``, ``scontrol``, repair hooks).

gpu-health ships as its own image and may not import ``gpucatalog.core.executor``; this is
its equivalent: argument lists only, never a shell, always a timeout. Called by the probes, the
Slurm hook and the command actuators.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from gpucatalog.gpuhealth.errors import GpuHealthError


class CommandError(GpuHealthError):
    """The command could not be started or ran past its timeout."""

    def __init__(self, argv: Sequence[str], message: str) -> None:
        super().__init__(f"{' '.join(argv)}: {message}")
        self.argv = list(argv)


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def run(argv: Sequence[str], *, timeout: float = 30.0, input: str | None = None) -> Completed:
    args = [str(a) for a in argv]
    if not args:
        raise CommandError(args, "empty command")
    try:
        proc = subprocess.run(
            args, input=input, capture_output=True, text=True, timeout=timeout, check=False, errors="replace"
        )
    except FileNotFoundError as exc:
        raise CommandError(args, f"executable not found: {exc.filename}") from exc
    except PermissionError as exc:
        raise CommandError(args, f"not executable: {exc.filename}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CommandError(args, f"timed out after {timeout:g}s") from exc
    return Completed(tuple(args), proc.returncode, proc.stdout or "", proc.stderr or "")
