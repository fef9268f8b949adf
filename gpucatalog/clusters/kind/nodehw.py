"""SIMULATED GPU node hardware for kind's workers: the sim's node folder, copied into each worker
container at :data:`NODE_ROOT`, and faults injected into it.

A kind node is a container on a machine without GPUs: it has no nvidia-smi, GPU kernel log or
InfiniBand sysfs, and its ``/dev/kmsg`` is the host's. So each GPU worker gets what a sim node
gets (:mod:`gpucatalog.clusters.sim.nodefs`), at ``/var/lib/gpu-catalog-node``:
``usr/bin/nvidia-smi`` printing the node's readings from ``sim/``, ``dev/kmsg`` (a file),
``sys/class/infiniband``, and ``sim/hw.json`` (what the DRA stand-in publishes). A bundle's kind
profile points gpu-health's agent (``nvidiaSmi``, its ``hostPaths``) and the DRA driver's
``driverRoot`` there, so the real agent in a real pod reads them.

The provider keeps a copy on the host (``<state>/nodes/<node>``); :func:`inject` first takes
the node's own state back into it (a repair on the node may have changed it), edits it with the
sim's own fault code and copies the result into the node. The kernel log is rewritten in place,
never replaced: a pod that mounts that one file keeps its inode.

A repair runs on the node, as a real one would: the folder holds the readings it was seeded
with (``healthy/``) and ``usr/sbin/gpu-catalog-sim-repair``, a SIMULATED GPU reset or reboot that
puts them back and empties the kernel log. The kind profiles of gpu-queueing and gpu-scheduling
have gpu-health's ``repair-pod`` hook run it in a pod on the broken node.
"""

from __future__ import annotations

import io
import shutil
import stat
import tarfile
from pathlib import Path
from typing import Any

from gpucatalog.clusters import shapes
from gpucatalog.clusters.sim import faults, nodefs, nvidiasmi
from gpucatalog.core import executor

NODE_ROOT = "/var/lib/gpu-catalog-node"
KMSG = "dev/kmsg"
FAULTED = ("sim", "sys")  # the folders a fault changes (usr/ holds the programs, written once at seed)
KMSG_NEW = ".kmsg.new"
# Unpacks a fault's tar stream into the node folder ($1); the kernel log goes into the existing
# file (`cat >` keeps its inode, which the agent's pod mounts). A constant script: the folder is
# its one argument, never spliced into it.
_UNPACK = 'tar -x -C "$1" && cat "$1/.kmsg.new" > "$1/dev/kmsg" && rm "$1/.kmsg.new"'
HEALTHY = "healthy"  # the seeded readings a repair puts back (sim/ and sys/)
REPAIR = "usr/sbin/gpu-catalog-sim-repair"

# Files are replaced by rename, so a probe never reads half a file; the kernel log is emptied in
# place, since the agent's pod mounts that one file.
_REPAIR_SCRIPT = """#!/bin/sh
# SIMULATED GPU reset / reboot of a gpu-catalog kind node (no GPU here): the node's readings go
# back to the healthy ones it was seeded with, and its kernel log is emptied.
set -eu
D='{root}'
cd "$D/{healthy}"
find sim sys -type d | while read -r d; do mkdir -p "$D/$d"; done
find sim sys -type f | while read -r f; do cp "$f" "$D/$f.repair-new"; mv -f "$D/$f.repair-new" "$D/$f"; done
: > "$D/{kmsg}"
msg="simulated repair of ${{NODE_NAME:-this node}} (${{GPU_HEALTH_ACTION:-repair}}): healthy readings restored"
echo "$msg"
# in a pod, the kubelet's termination message: what gpu-health records as the repair's detail
if [ -w /dev/termination-log ]; then echo "$msg" > /dev/termination-log; fi
"""


def host_dir(state: Path, node: str) -> Path:
    """The host's master copy of ``node``'s folder. Its parent's parent names the cluster, as the
    sim's layout does (the sim's fault code derives GPU UUIDs from both names)."""
    return state / "nodes" / node


def seed(nodes: list[str], shape: shapes.Shape, state: Path, env: dict[str, str]) -> None:
    """Healthy readings for each of ``nodes``, copied into the node container at :data:`NODE_ROOT`."""
    for node in nodes:
        folder = host_dir(state, node)
        nodefs.seed(folder, shape, state.name)
        nvidiasmi.write_nvidia_smi(folder, Path(NODE_ROOT))  # reads its files where the node has them
        write_repair(folder)
        executor.run(["docker", "cp", folder, f"{node}:{NODE_ROOT}"], env=env, timeout=60)


def sync(node: str, state: Path, env: dict[str, str]) -> None:
    """Copy what a fault changes (readings, sysfs, kernel log) from the host's copy of ``node``'s
    folder into the node, in one ``docker exec``: a tar stream unpacked there, the kernel log
    written into the existing file."""
    folder = host_dir(state, node)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for sub in FAULTED:
            if (folder / sub).is_dir():
                tar.add(folder / sub, arcname=sub)
        tar.add(folder / KMSG, arcname=KMSG_NEW)
    executor.run(["docker", "exec", "-i", node, "sh", "-c", _UNPACK, "sh", NODE_ROOT], input=buf.getvalue(),
                 env=env, timeout=60, text=False)


def write_repair(folder: Path) -> None:
    """The healthy snapshot of a freshly seeded ``folder`` and the script that restores it."""
    for sub in ("sim", "sys"):
        shutil.copytree(folder / sub, folder / HEALTHY / sub, dirs_exist_ok=True)
    script = folder / REPAIR
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(_REPAIR_SCRIPT.format(root=NODE_ROOT, healthy=HEALTHY, kmsg=KMSG))
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def pull(node: str, state: Path, env: dict[str, str]) -> None:
    """Take the node's readings and kernel log back into the host's copy (one ``tar`` stream)."""
    out = executor.output_bytes(["docker", "exec", node, "tar", "-C", NODE_ROOT, "-cf", "-", *FAULTED, KMSG],
                                env=env, timeout=60)
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        tar.extractall(host_dir(state, node), filter="data")


def inject(node: str, kind: str, state: Path, env: dict[str, str], **kw: Any) -> str:
    """One fault (the sim's kinds, :data:`gpucatalog.clusters.sim.faults.KINDS`) on ``node``."""
    pull(node, state, env)
    what = faults.inject(host_dir(state, node), kind, **kw)
    sync(node, state, env)
    return what
