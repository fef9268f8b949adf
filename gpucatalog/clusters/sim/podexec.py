"""Launcher of one sim-kubelet container process: private mount namespace, pod root, exec.

Run by the sim kubelet as ``python -m …sim.podexec SPEC.json [STARTED_FD]`` (in its own session). It

0. enters the pod's network namespace (``net`` in the spec: the pause process holding it, see
   :mod:`.netns`; absent for ``hostNetwork`` pods),
1. unshares a mount namespace (nothing it mounts is visible to the host, and every mount
   disappears with the process),
2. builds a pod root on a small tmpfs whose top-level entries are bind mounts of the host's
   (so the program, Python and this repository are where they are on the host),
3. bind-mounts each volume (hostPath from the node folder, ServiceAccount token files,
   ConfigMaps, Secrets, emptyDirs) at its mountPath; when a mountPath's parent does not exist
   on the host, the deepest existing ancestor is shadowed by a tmpfs that re-binds the original
   entries, so nothing is ever created on the host file system,
4. chroots into the pod root and execs the container argv with the pod's environment.

For a base image (``rootfs`` in the spec, :mod:`.rootfs`), the pod root holds a copy of that
root's links and small files (the container's writable layer), its binaries bound read-only, and
the host's /proc, /dev and /sys, instead of the host's top-level entries. When the command cannot
be executed, the reason goes to ``<spec>.start-error`` (the kubelet reports StartError) and the
exit code is 128.

Needs root (CAP_SYS_ADMIN), as a real kubelet does.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = _libc.mount(
        src.encode() if src else None, dst.encode(), fstype.encode() if fstype else None, flags,
        data.encode() if data else None,
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} -> {dst}: {os.strerror(err)}")


def _bind_entry(host: str, target: str) -> None:
    """Mirror one host directory entry at ``target`` (bind for dirs/files, copy for symlinks)."""
    if os.path.islink(host):
        os.symlink(os.readlink(host), target)
    elif os.path.isdir(host):
        os.mkdir(target)
        _mount(host, target, None, MS_BIND | MS_REC)
    else:
        Path(target).touch()
        _mount(host, target, None, MS_BIND | MS_REC)


def _shadow(root: str, rel_dir: str) -> None:
    """Replace ``root/rel_dir`` by a tmpfs holding binds of the host directory's entries."""
    host = "/" + rel_dir
    target = os.path.join(root, rel_dir)
    if not os.path.isdir(host):
        # made inside the pod root by an earlier mount (on a tmpfs of ours): already writable.
        # e.g. /var/lib/kubelet on a host without a kubelet, for plugins_registry then plugins
        return
    entries = sorted(os.listdir(host))
    _mount("tmpfs", target, "tmpfs", 0, "size=1m,mode=755")
    for name in entries:
        try:
            _bind_entry(os.path.join(host, name), os.path.join(target, name))
        except OSError:
            continue  # an entry that cannot be mirrored (a socket, a vanished file) is left out


def _in_root(root: str, path: str) -> str:
    """``path`` as seen inside the pod root, symlinks resolved against the pod root (not the host)."""
    todo = [p for p in path.split("/") if p]
    done: list[str] = []
    hops = 0
    while todo:
        part = todo.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        cand = os.path.join(root, *done, part)
        if os.path.islink(cand) and hops < 40:
            hops += 1
            link = os.readlink(cand)
            if link.startswith("/"):
                done = []
            todo = [p for p in link.split("/") if p] + todo
            continue
        done.append(part)
    return "/".join(done)


def _mountpoint(root: str, mount_path: str, is_dir: bool, own_root: bool = False) -> str:
    """Where ``mount_path`` is mounted in the pod root, made when missing. ``own_root``: the root
    is the container's own copy (a base image's), so missing folders are simply made in it."""
    rel = _in_root(root, mount_path)
    target = os.path.join(root, rel)
    if os.path.lexists(target):
        return target
    parts = rel.split("/")
    if own_root:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if is_dir:
            os.mkdir(target)
        else:
            Path(target).touch()
        return target
    # deepest ancestor that exists in the pod root
    depth = len(parts) - 1
    while depth > 0 and not os.path.isdir(os.path.join(root, *parts[:depth])):
        depth -= 1
    if depth > 0:
        _shadow(root, "/".join(parts[:depth]))
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    if is_dir:
        os.mkdir(target)
    else:
        Path(target).touch()
    return target


HOST_ENTRIES = ("proc", "dev", "sys")
START_ERROR_CODE = 128


def _base_root(root: str, base: str) -> None:
    """Fill the (tmpfs) pod root from a base image's root: directories, links and small files
    copied, regular files over 64 KiB (its binaries) bound read-only, /proc, /dev, /sys the host's."""
    for top, dirs, files in os.walk(base):
        rel = os.path.relpath(top, base)
        for d in list(dirs):
            src, dst = os.path.join(top, d), os.path.normpath(os.path.join(root, rel, d))
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
                dirs.remove(d)
            elif rel == "." and d in HOST_ENTRIES:
                _bind_entry("/" + d, dst)
                dirs.remove(d)
            else:
                os.mkdir(dst, os.stat(src).st_mode & 0o7777)
                os.chmod(dst, os.stat(src).st_mode & 0o7777)
        for f in files:
            src, dst = os.path.join(top, f), os.path.normpath(os.path.join(root, rel, f))
            if os.path.islink(src):
                os.symlink(os.readlink(src), dst)
            elif os.path.getsize(src) > 64 * 1024:
                Path(dst).touch(os.stat(src).st_mode & 0o7777)
                _mount(src, dst, None, MS_BIND)
                _mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
            else:
                Path(dst).write_bytes(Path(src).read_bytes())
                os.chmod(dst, os.stat(src).st_mode & 0o7777)


def setup_root(root: str, mounts: list[dict[str, object]], base: str | None = None) -> None:
    if _libc.unshare(CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWNS): {os.strerror(err)}")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    os.makedirs(root, exist_ok=True)
    if base:
        _mount("tmpfs", root, "tmpfs", 0, "size=256m,mode=755")
        _base_root(root, base)
    else:
        _mount("tmpfs", root, "tmpfs", 0, "size=4m,mode=755")
        for name in sorted(os.listdir("/")):
            try:
                _bind_entry("/" + name, os.path.join(root, name))
            except OSError:
                continue
    for m in sorted(mounts, key=lambda m: str(m["mountPath"]).count("/")):
        src = str(m["source"])
        target = _mountpoint(root, str(m["mountPath"]), os.path.isdir(src), own_root=bool(base))
        _mount(src, target, None, MS_BIND | MS_REC)
        if m.get("readOnly"):
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def join_pod_network(net: dict[str, object]) -> None:
    from gpucatalog.clusters.sim import netns, procs

    holder = procs.PidRecord(str(net["name"]), int(str(net["pid"])), int(str(net["ticks"])))
    if not holder.alive():  # checked by start time, so a recycled pid is never entered
        raise OSError(f"the pod's network namespace (pause pid {holder.pid}) is gone")
    netns.enter(f"/proc/{holder.pid}/ns/net")


def main(argv: list[str]) -> int:
    # the kubelet's end of this pipe reads EOF once the container's program runs (the exec closes
    # it), or a byte when it could not be started: a runtime's "started" comes after the exec, so
    # nothing (a status, kubectl exec, a probe) meets this launcher in the host's namespaces
    started = int(argv[1]) if len(argv) > 1 else -1
    if started >= 0:
        os.set_inheritable(started, False)
    try:
        return _launch(argv[0])
    finally:  # reached only when the program was not exec'd
        if started >= 0:
            os.write(started, b"!")


def _launch(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    if spec.get("net"):
        join_pod_network(spec["net"])
    # the spec's folder, kept open across the chroot (not inherited by the exec'd program) for a
    # start error's reason
    spec_dir = os.open(os.path.dirname(os.path.abspath(spec_path)), os.O_RDONLY | os.O_DIRECTORY)
    setup_root(spec["root"], spec["mounts"], spec.get("rootfs"))
    os.chroot(spec["root"])
    env = dict(spec["env"])
    try:
        workdir = spec.get("workingDir") or "/"
        os.makedirs(workdir, exist_ok=True)  # a runtime creates a missing workingDir
        os.chdir(workdir)
        os.execvpe(spec["argv"][0], spec["argv"], env)
    except OSError as exc:
        why = f"exec: {spec['argv'][0]!r}: {exc.strerror or exc}"
        print(f"sim podexec: cannot run {spec['argv'][0]}: {exc}", file=sys.stderr)
        name = Path(spec_path).with_suffix(".start-error").name
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=spec_dir)
        with os.fdopen(fd, "w") as f:
            f.write(why)
        return START_ERROR_CODE
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
