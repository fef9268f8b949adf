"""What a mapped executable costs to describe is bounded: its Go build information is read from
the ELF section (or a bounded scan), never by reading a file of several GiB whole; its version
probe (``versionArgs``) is capped in output and time, and leaves no process behind."""

from __future__ import annotations

import os
import struct
import sys
import time
import tracemalloc
from pathlib import Path

from gpucatalog.clusters.sim import binversion

GiB = 1 << 30


def _buildinfo(version: str) -> bytes:
    def varint(n: int) -> bytes:
        out = b""
        while n >= 0x80:
            out += bytes([n & 0x7F | 0x80])
            n >>= 7
        return out + bytes([n])

    go = b"go1.22.0"
    mod = b"0" * 16 + f"path\texample.com/x\nmod\texample.com/x\t{version}\t\n".encode() + b"1" * 16
    head = binversion.GO_BUILDINFO_MAGIC + bytes([8, 0x2]) + b"\0" * 16
    return head + varint(len(go)) + go + varint(len(mod)) + mod


def _elf_with_buildinfo(path: Path, size: int, info_at: int, version: str) -> None:
    """A sparse ELF64 file of ``size`` bytes whose .go.buildinfo section is at ``info_at``."""
    names = b"\0.shstrtab\0.go.buildinfo\0"
    sh_at = 4096
    names_at = sh_at + 3 * 64

    def section(name: int, offset: int, length: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, 1, 0, 0, offset, length, 0, 0, 16, 0)

    head = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    head += struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0, 0, sh_at, 0, 64, 0, 0, 64, 3, 1)
    info = _buildinfo(version)
    with path.open("wb") as f:
        f.write(head)
        f.seek(sh_at)
        f.write(b"\0" * 64 + section(1, names_at, len(names)) + section(11, info_at, len(info)))
        f.write(names)
        f.seek(info_at)
        f.write(info)
        f.truncate(size)
    path.chmod(0o755)


def test_a_several_gib_executable_is_not_read_whole(tmp_path: Path) -> None:
    exe = tmp_path / "scheduler"
    _elf_with_buildinfo(exe, 4 * GiB, 3 * GiB, "v0.16.8")
    tracemalloc.start()
    try:
        t0 = time.monotonic()
        assert binversion.go_build_info(exe)["mod"] == "v0.16.8"
        assert binversion.reported_version(exe) == "v0.16.8"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20 and time.monotonic() - t0 < 5


def test_without_elf_sections_the_scan_is_bounded(tmp_path: Path) -> None:
    exe = tmp_path / "blob"
    with exe.open("wb") as f:  # the magic lies beyond what is scanned: not found, and not read to it
        f.seek(3 * GiB)
        f.write(_buildinfo("v1.0.0"))
    tracemalloc.start()
    try:
        assert binversion.go_build_info(exe) == {}
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    near = tmp_path / "near"  # within the scan it is found, at a 16-byte boundary
    with near.open("wb") as f:
        f.seek(5 << 20)
        f.write(_buildinfo("v1.0.1"))
    assert binversion.go_build_info(near)["mod"] == "v1.0.1"


def _script(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "probe"
    exe.write_text(f"#!{sys.executable}\n{body}")
    exe.chmod(0o755)
    return exe


def test_a_version_probe_that_floods_is_capped(tmp_path: Path) -> None:
    exe = _script(tmp_path, "import sys\nsys.stdout.write('v1.2.3 ')\nwhile True: sys.stdout.write('x' * 65536)\n")
    t0 = time.monotonic()
    assert binversion.reported_version(exe, ("--version",)) == "v1.2.3"
    assert time.monotonic() - t0 < 5


def test_a_version_probe_leaving_a_child_on_stdout_is_not_waited_for(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    exe = _script(tmp_path, "import subprocess, sys\n"
                            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
                            f"open({str(pidfile)!r}, 'w').write(str(c.pid))\nprint('v2.0.0')\n")
    t0 = time.monotonic()
    assert binversion.reported_version(exe, ("--version",)) == "v2.0.0"
    assert time.monotonic() - t0 < 5
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5  # SIGKILL was sent: the child ends (or is a zombie for init)
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
                break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        raise AssertionError(f"the probe's child {pid} was left running")
