"""Atomic contents of a ConfigMap, Secret or projected volume folder, as a real kubelet writes them.

Used by :mod:`.podspec` when it first writes a pod's volumes and whenever the objects behind them
change (the sim kubelet refreshes them while the pod runs). A process that reads the folder sees
either the old files or the new ones, never a mix: the payload lives in a timestamped folder
``..<time>_<n>``, ``..data`` is a symlink to it swapped by ``rename`` (atomic), and each top-level
name is a symlink through ``..data`` (``tls.crt -> ..data/tls.crt``). The folder itself stays
the same inode, so a bind mount of it (``podexec``) sees every update, as in a container.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

DATA = "..data"


def current(dest: Path) -> dict[str, bytes]:
    """The payload ``dest`` holds now (empty when it was never written)."""
    data = dest / DATA
    if not data.is_dir():
        return {}
    return {p.relative_to(data).as_posix(): p.read_bytes() for p in sorted(data.rglob("*")) if p.is_file()}


def write(dest: Path, files: dict[str, bytes]) -> bool:
    """Make ``dest`` hold exactly ``files`` (relative path -> bytes); False when it already did."""
    dest.mkdir(parents=True, exist_ok=True)
    if (dest / DATA).is_symlink() and current(dest) == files:
        return False
    stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    staged = dest / stamp
    staged.mkdir()
    for rel, data in files.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_bytes(data)
    old = os.readlink(dest / DATA) if (dest / DATA).is_symlink() else None
    tmp_link = dest / "..data_tmp"
    if tmp_link.is_symlink():
        tmp_link.unlink()
    tmp_link.symlink_to(stamp)
    os.replace(tmp_link, dest / DATA)  # the switch: readers see old or new, never both
    tops = {rel.split("/", 1)[0] for rel in files}
    for name in tops:
        link = dest / name
        if not link.is_symlink():
            if link.is_dir():  # a plain folder or file from an older layout
                shutil.rmtree(link)
            elif link.exists():
                link.unlink()
            link.symlink_to(f"{DATA}/{name}")
    for entry in dest.iterdir():
        if entry.name.startswith(".."):
            continue
        if entry.is_symlink() and entry.name not in tops:
            entry.unlink()  # a key that is gone
    if old is not None and old != stamp:
        shutil.rmtree(dest / old, ignore_errors=True)
    return True
