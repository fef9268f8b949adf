"""What a host executable is, for the evidence of a sim run: its sha256 and the version it reports.

Called by :mod:`.imagemap` for every executable an image-map overlay maps an image to. The version
comes from the executable itself: asked with the overlay's ``versionArgs`` when given (the first
version-looking word of its output), else read from a Go binary's embedded build information
(the ``-X …/version.gitVersion=`` link flag KAI's build sets, else the main module's version,
which ``go build`` stamps from the checkout's tag), else ``unknown``.
"""

from __future__ import annotations

import json
import re
import shlex
import struct
from pathlib import Path
from typing import BinaryIO

from gpucatalog.core import errors, executor
from gpucatalog.toolchain import build

GO_BUILDINFO_MAGIC = b"\xff Go buildinf:"
# Bounds on what is read of a mapped executable (it may be several GiB): the build information
# itself (a module list; KAI's is a few KiB), the section table, and, for a file without ELF
# sections, how far the magic is looked for.
MAX_BUILDINFO = 1 << 20
MAX_SECTIONS = 4096
MAX_SECTION_NAMES = 1 << 16
MAX_SCAN = 256 << 20
VERSION = re.compile(r"\bv?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?\b")
UNKNOWN = "unknown"
VERSION_TIMEOUT_S = 10
# what of a version probe's output is read (a version is in its first lines)
VERSION_OUTPUT_CAP = 64 << 10


def sha256(path: Path) -> str:
    return "sha256:" + build.sha256_file(path)


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
    as ``x:name``) of a Go ≥ 1.18 binary; empty for anything else. Reads at most the ELF headers
    and the ``.go.buildinfo`` section, or (no ELF section: another format) a bounded scan, so a
    mapped executable of several GiB is never read whole."""
    with path.open("rb") as f:
        at = _elf_section(f, b".go.buildinfo")
        if at is None or not _magic_at(f, at):
            at = _scan_for_magic(f)
        if at is None:
            return {}
        f.seek(at)
        data = f.read(MAX_BUILDINFO)
    if len(data) < 32 or not data[15] & 0x2:
        return {}  # the pre-1.18 pointer format
    try:
        n, pos = _uvarint(data, 32)
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


def _magic_at(f: BinaryIO, at: int) -> bool:
    f.seek(at)
    return f.read(len(GO_BUILDINFO_MAGIC)) == GO_BUILDINFO_MAGIC


def _elf_section(f: BinaryIO, name: bytes) -> int | None:
    """File offset of ELF section ``name`` (None: not ELF, no such section, or odd headers)."""
    f.seek(0)
    head = f.read(64)
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    wide, end = head[4] == 2, "<" if head[5] == 1 else ">"
    if wide:
        if len(head) < 64:
            return None
        (shoff,) = struct.unpack_from(end + "Q", head, 0x28)
        entsize, count, names = struct.unpack_from(end + "HHH", head, 0x3A)
        fmt, need = end + "IIQQQQ", 40
    else:
        (shoff,) = struct.unpack_from(end + "I", head, 0x20)
        entsize, count, names = struct.unpack_from(end + "HHH", head, 0x2E)
        fmt, need = end + "IIIIII", 24
    if not 0 < count <= MAX_SECTIONS or entsize < need or names >= count:
        return None
    f.seek(shoff)
    table = f.read(count * entsize)
    if len(table) < count * entsize:
        return None
    sections = [struct.unpack_from(fmt, table, i * entsize) for i in range(count)]
    _n, _t, _f, _a, str_off, str_size = sections[names]
    f.seek(str_off)
    strtab = f.read(min(str_size, MAX_SECTION_NAMES))
    for name_at, _t, _f, _a, offset, _size in sections:
        if strtab[name_at:name_at + len(name) + 1] == name + b"\0":
            return int(offset)
    return None


def _scan_for_magic(f: BinaryIO) -> int | None:
    """Offset of the build-info magic (16-byte aligned) in the first MAX_SCAN bytes, read in windows."""
    f.seek(0)
    keep = len(GO_BUILDINFO_MAGIC) - 1
    base, tail = 0, b""
    while base < MAX_SCAN:
        chunk = f.read(1 << 20)
        if not chunk:
            return None
        window, start = tail + chunk, base - len(tail)
        at = window.find(GO_BUILDINFO_MAGIC)
        while at != -1:
            if (start + at) % 16 == 0:
                return start + at
            at = window.find(GO_BUILDINFO_MAGIC, at + 1)
        base += len(chunk)
        tail = window[-keep:]
    return None


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
            _code, out = executor.probe([path, *version_args], timeout=VERSION_TIMEOUT_S, cap=VERSION_OUTPUT_CAP)
        except errors.ToolError:
            return UNKNOWN
        m = VERSION.search(out.decode(errors="replace"))
        return m.group(0) if m else UNKNOWN
    return _from_go(go_build_info(path)) or UNKNOWN
