"""Fake GPU device files: character devices made with mknod, one per GPU index.

Slurm 22.05 drops a GPU gres that has no ``File=`` ("Removing file-less GPU") and rejects a
``File=`` that is not a character or block device, so each simulated GPU gets a real device
node ``<state>/dev/nvidia<N>`` (major 195, NVIDIA's). Nothing ever opens them. Needs root
(CAP_MKNOD). Called by :mod:`.cluster`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpucatalog.core import errors

NVIDIA_MAJOR = 195


def make_gpu_devices(dev_dir: Path, count: int) -> list[Path]:
    dev_dir.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    for i in range(count):
        path = dev_dir / f"nvidia{i}"
        if path.exists():
            if not stat.S_ISCHR(path.stat().st_mode):
                raise errors.ConflictError(f"{path} exists and is not a character device")
        else:
            try:
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, i))
            except PermissionError as exc:
                raise errors.InputError(
                    f"cannot create fake GPU device {path}: {exc.strerror}",
                    expected="root (CAP_MKNOD) to run the local Slurm cluster",
                ) from exc
        made.append(path)
    return made
