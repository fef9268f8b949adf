"""What a host executable is, for the evidence of a sim run: its sha256 and the version it reports.

Called by :mod:`.imagemap` for every executable an image-map overlay maps an image to. The version
comes from the executable itself: asked with the overlay's ``versionArgs`` when given (the first
version-looking word of its output), else read from a Go binary's embedded build information
(the ``-X …/version.gitVersion=`` link flag KAI's build sets, else the main module's version,
which ``go build`` stamps from the checkout's tag), else ``unknown``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from pathlib import Path

from gpucatalog.core import errors, executor

GO_BUILDINFO_MAGIC = b"\xff Go buildinf:"
VERSION = re.compile(r"\bv?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?\b")
UNKNOWN = "unknown"
VERSION_TIMEOUT_S = 30


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(data):
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise ValueError("truncated varint")


def go_build_info(path: Path) -> dict[str, str]:
    """``go``, ``path``, ``mod`` (main module version) and ``build -X`` settings (``-X name=value``
    as ``x:name``) of a Go ≥ 1.18 binary; empty for anything else."""
    data = path.read_bytes()
    at = data.find(GO_BUILDINFO_MAGIC)
    while at != -1 and at % 16:
        at = data.find(GO_BUILDINFO_MAGIC, at + 1)
    if at == -1 or len(data) < at + 32 or not data[at + 15] & 0x2:
        return {}  # not Go, or the pre-1.18 pointer format
    try:
        n, pos = _uvarint(data, at + 32)
        go_version = data[pos:pos + n].decode(errors="replace")
        n, pos = _uvarint(data, pos + n)
        modinfo = data[pos:pos + n]
    except ValueError:
        return {}
    if len(modinfo) >= 33 and modinfo[-17:-16] == b"\n":
        modinfo = modinfo[16:-16]  # the linker's sentinels around the text
    out = {"go": go_version}
    for line in modinfo.decode(errors="replace").splitlines():
        parts = line.split("\t")
        if parts[0] == "path" and len(parts) > 1:
            out["path"] = parts[1]
        elif parts[0] == "mod" and len(parts) > 2:
            out["mod"] = parts[2]
        elif parts[0] == "build" and len(parts) > 1 and parts[1].startswith("-ldflags="):
            out.update(_x_flags(parts[1][len("-ldflags="):]))
    return out


def _x_flags(value: str) -> dict[str, str]:
    """``-X name=value`` link flags of a build-info ``-ldflags`` value, as ``x:name``. Go quotes
    the value when it holds spaces (``-ldflags="-X a=1 -X b=2"``), and KAI's build quotes each
    flag again inside (``-X 'a=1'``)."""
    if value.startswith('"'):
        try:
            value = str(json.loads(value))
        except ValueError:
            value = value.strip('"')
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    out = {}
    for i, word in enumerate(words):
        setting = word[3:] if word.startswith("-X=") else (words[i + 1] if word == "-X" and i + 1 < len(words) else "")
        name, sep, val = setting.partition("=")
        if sep and name:
            out[f"x:{name}"] = val
    return out


def _from_go(info: dict[str, str]) -> str:
    for key, value in sorted(info.items()):
        if key.startswith("x:") and key.endswith(".gitVersion") and VERSION.search(value):
            return value
    mod = info.get("mod", "")
    return mod if mod and mod != "(devel)" else ""


def reported_version(path: Path, version_args: tuple[str, ...] = ()) -> str:
    """The version ``path`` reports (see the module docstring); ``unknown`` when it reports none."""
    if version_args:
        try:
            proc = executor.run([path, *version_args], check=False, timeout=VERSION_TIMEOUT_S)
        except errors.ToolError:
            return UNKNOWN
        m = VERSION.search(proc.stdout + "\n" + proc.stderr)
        return m.group(0) if m else UNKNOWN
    return _from_go(go_build_info(path)) or UNKNOWN
