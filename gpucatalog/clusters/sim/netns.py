"""Per-pod network namespaces of sim-kubelet pods: made, entered, and gone with their holder.

A pod that is not ``hostNetwork`` gets its own network namespace, as a kubelet with a CNI plugin
gives it: its own loopback, its pod IP (``100.64.x.y``, on that loopback) and its own ports, so
every pod may bind ``:8080``. The namespace is held by a pause process (``unshare --net`` +
``sleep``), recorded like a container (``<pod folder>/pause.pid``): whatever kills the pod's
processes (deletion, ``down``, the teardown after a crash, a restarted kubelet) also ends the
namespace. Nothing is named under ``/run/netns``, so nothing can be left behind there.

Who uses what:

* the sim kubelet: :func:`create` / :func:`remove` per pod, and the entry files under
  ``<state>/podnet/<pod IP>.json`` (pod IP -> holder) that the relay and the egress proxy read;
* ``podexec``: :func:`enter` before it builds the pod root, so every container of the pod shares
  the namespace;
* the egress proxy and the relay (:mod:`.relay`): :func:`socket_in` to open sockets inside a
  pod's namespace (the API server dialling a webhook; the pod's listener for the API server).

Needs root (CAP_SYS_ADMIN), as ``podexec`` already does.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucatalog.clusters.sim import procs
from gpucatalog.core import errors, executor

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_lock = threading.Lock()  # one namespace switch at a time per process (setns is per thread)


@dataclass(frozen=True)
class PodNet:
    """A pod's network namespace: its pod IP and the pause process that holds the namespace."""

    ip: str
    holder: procs.PidRecord

    @property
    def path(self) -> str:
        return f"/proc/{self.holder.pid}/ns/net"

    def alive(self) -> bool:
        return self.holder.alive()


def entries_dir(state_root: Path) -> Path:
    return state_root / "podnet"


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


def enter(path: str) -> None:
    """Move the calling (single-threaded) process into the namespace at ``path`` for good."""
    fd = os.open(path, os.O_RDONLY)
    try:
        _setns(fd)
    finally:
        os.close(fd)


@contextmanager
def inside(path: str) -> Iterator[None]:
    """Run the block with this thread inside the namespace at ``path``, then come back."""
    with _lock:
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(path, os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(target)
            os.close(home)


def socket_in(net: PodNet) -> socket.socket:
    """A TCP/IPv4 socket that lives in ``net``'s namespace (a socket keeps the namespace it was
    made in, whatever the thread does later)."""
    if not net.alive():
        raise OSError(f"network namespace of pod IP {net.ip} is gone")
    with inside(net.path):
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)


def create(pod_dir: Path, ip: str, state_root: Path) -> tuple[PodNet, Any]:
    """Make the pod's namespace: a pause process in a new one, loopback up with ``ip`` on it;
    record the holder in ``pod_dir`` and the entry under ``state_root``. Returns the namespace
    and the pause process (a Popen, for :func:`remove` to reap)."""
    own = os.stat("/proc/self/ns/net").st_ino
    proc = executor.spawn(["unshare", "--net", "--", "sleep", "infinity"], log_path=pod_dir / "pause.log")
    rec = procs.record(pod_dir, "pause", proc.pid)
    deadline = time.monotonic() + 5
    # unshare switches namespace and then execs sleep: wait until the switch happened
    while rec is not None and time.monotonic() < deadline:
        try:
            if os.stat(f"/proc/{proc.pid}/ns/net").st_ino != own:
                break
        except OSError:
            rec = None
            break
        time.sleep(0.002)
    if rec is None or os.stat(f"/proc/{proc.pid}/ns/net").st_ino == own:
        proc.kill()
        proc.wait()
        raise errors.ToolError(["unshare", "--net"], 1, f"no network namespace for pod IP {ip}")
    net = PodNet(ip, rec)
    batch = pod_dir / "net.batch"
    batch.write_text(f"link set lo up\naddr add {ip}/32 dev lo\n")
    executor.run(["nsenter", f"--net={net.path}", "ip", "-batch", str(batch)], timeout=20)
    entries = entries_dir(state_root)
    entries.mkdir(exist_ok=True)
    tmp = entries / f".{ip}.tmp"
    tmp.write_text(json.dumps({"ip": ip, "name": rec.name, "pid": rec.pid, "ticks": rec.ticks}))
    tmp.replace(entries / f"{ip}.json")
    return net, proc


def remove(net: PodNet, pause: Any, state_root: Path) -> None:
    """End the pause process ``pause`` (the namespace goes with it) and drop the entry."""
    (entries_dir(state_root) / f"{net.ip}.json").unlink(missing_ok=True)
    procs.signal_group(net.holder, signal.SIGKILL)
    pause.wait()


def lookup(state_root: Path, ip: str) -> PodNet | None:
    """The live namespace of pod IP ``ip``, or None (no such pod, hostNetwork, or gone)."""
    try:
        d = json.loads((entries_dir(state_root) / f"{ip}.json").read_text())
        net = PodNet(str(d["ip"]), procs.PidRecord(str(d["name"]), int(d["pid"]), int(d["ticks"])))
    except (OSError, ValueError, KeyError):
        return None
    return net if net.alive() else None


def all_entries(state_root: Path) -> list[PodNet]:
    """Every recorded pod namespace that is still alive."""
    d = entries_dir(state_root)
    found = [lookup(state_root, p.stem) for p in sorted(d.glob("*.json"))] if d.is_dir() else []
    return [n for n in found if n is not None]


def clear(state_root: Path) -> None:
    """Forget every entry (a new kubelet starts its pods afresh)."""
    d = entries_dir(state_root)
    for p in d.glob("*.json") if d.is_dir() else []:
        p.unlink(missing_ok=True)
