"""Root file systems the sim kubelet runs common base images on (``data/base-images.yaml``).

``busybox``: Debian's busybox-static binary with a link per applet, built once per binary (keyed by
its sha256) under the cache folder, atomically (a half-built tree is never used). :mod:`.podexec`
copies the tree (links and ``/etc``: a few kilobytes) into the container's own tmpfs root and binds
the binary read-only, so a container may write anywhere but never into the cache.

``agnhost``: the busybox root with Kubernetes' e2e program at ``/agnhost`` (as its image has it),
the pinned build of the toolchain's on-demand ``agnhost`` group, and ``curl`` (the image carries it:
upstream e2e specs exec ``curl`` inside agnhost pods), Debian's, with the shared libraries it loads
at the paths it loads them from; only once agnhost is built (the sim kubelet never builds it: until
then agnhost pods stay kwok's).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from functools import cache
from pathlib import Path

from gpucatalog.core import cachedir, errors, executor
from gpucatalog.toolchain import build

BUSYBOX = Path("/bin/busybox")
CURL = Path("/usr/bin/curl")
KINDS = ("busybox", "agnhost", "host")
# a bash for images whose CMD is bash: busybox's sh runs what simple bash scripts ask
BASH = "#!/bin/sh\nexec /bin/sh \"$@\"\n"
ETC = {
    "passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hostname": "sim\n",
    "os-release": 'NAME="gpu-catalog sim busybox root"\nID=busybox\n',
}


def available(kind: str) -> bool:
    """Whether this host can build ``kind`` (busybox: Debian's busybox-static is installed;
    agnhost: that, Debian's curl, and the pinned agnhost built)."""
    if kind == "host":
        return True
    busybox = BUSYBOX.is_file() and os.access(BUSYBOX, os.X_OK)
    return busybox and (kind == "busybox" or kind == "agnhost" and CURL.is_file() and _agnhost_stamp() != "")


@cache
def _agnhost_path() -> Path:
    return build.tool_path("agnhost")  # read from the manifest once: asked at every agnhost container start


def _agnhost_stamp() -> str:
    """The sha256 the toolchain recorded for its agnhost build ('' when not built)."""
    path = _agnhost_path()
    stamp = path.with_name("agnhost.sha256")
    return stamp.read_text().strip() if path.is_file() and stamp.is_file() else ""


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ensure(kind: str, cache: Path | None = None) -> Path | None:
    """The built root of ``kind`` (None for ``host``: the host's own file system)."""
    if kind == "host":
        return None
    if not available(kind):
        raise errors.NotFoundError(
            f"root file system {kind!r} cannot be built here: {BUSYBOX} is missing"
            + (f", {CURL} is missing or agnhost is not built" if kind == "agnhost" else ""),
            expected="Debian's busybox-static and curl (scripts/install-system-deps)"
            + ("; catalog toolchain ensure --tool agnhost" if kind == "agnhost" else ""))
    base = (cache or cachedir.root()) / "rootfs"
    # keyed by what goes in (the agnhost build by the sha256 its stamp recorded: not hashed again
    # for every container start)
    dest = base / (f"busybox-{_sha(BUSYBOX)[:16]}" if kind == "busybox"
                   else f"agnhost-{_sha(BUSYBOX)[:16]}-{_agnhost_stamp()[:16]}-{_sha(CURL)[:8]}")
    if dest.is_dir():
        return dest
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=base))
    try:
        _build_busybox(tmp)
        if kind == "agnhost":
            _add_agnhost(tmp)
            _add_program(tmp, CURL)
        try:
            tmp.rename(dest)
        except OSError:  # another process built it first
            if not dest.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _build_busybox(root: Path) -> None:
    applets = executor.run([str(BUSYBOX), "--list"]).stdout.split()
    for d in ("bin", "usr/local/bin", "etc", "tmp", "root", "home", "var/tmp", "run", "proc", "dev", "sys"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "var/tmp").chmod(0o1777)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for name in applets:
        if name != "busybox" and "/" not in name:
            os.symlink("busybox", root / "bin" / name)
    if not (root / "bin" / "bash").exists():
        (root / "bin" / "bash").write_text(BASH)
        (root / "bin" / "bash").chmod(0o755)
    os.symlink("bin", root / "sbin")
    os.symlink("../bin", root / "usr" / "bin")
    os.symlink("../bin", root / "usr" / "sbin")
    for name, text in ETC.items():
        (root / "etc" / name).write_text(text)


def _add_agnhost(root: Path) -> None:
    """agnhost where its image has it (``/agnhost``, and the ``agnhost-2`` link), a hard link to
    the toolchain's build where the file system allows (it is large), else a copy."""
    src = _agnhost_path()
    try:
        os.link(src, root / "agnhost")
    except OSError:
        shutil.copy2(src, root / "agnhost")
    os.symlink("agnhost", root / "agnhost-2")
    (root / "uploads").mkdir()


def _add_program(root: Path, program: Path) -> None:
    """``program`` at /bin in the root, with each shared library it loads (and the loader) copied
    to the path it is loaded from, so it runs there as on the host."""
    shutil.copy2(program, root / "bin" / program.name)
    for lib in shared_libraries(program):
        dst = root / lib.relative_to("/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            shutil.copy2(lib, dst)  # the library's content under the name asked for (links followed)


def shared_libraries(program: Path) -> list[Path]:
    """The absolute paths ``ldd`` says ``program`` loads (the vDSO, which has none, left out)."""
    out = []
    for line in executor.run(["ldd", str(program)]).stdout.splitlines():
        where = line.split("=>")[-1].strip().split(" (")[0].strip()
        if where.startswith("/"):
            out.append(Path(where))
    return out
