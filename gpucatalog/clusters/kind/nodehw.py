"""SIMULATED GPU node hardware for kind's workers: the sim's node folder, copied into each worker
container at :data:`NODE_ROOT`, and faults injected into it.

A kind node is a container on a machine without GPUs: it has no nvidia-smi, GPU kernel log or
InfiniBand sysfs, and its ``/dev/kmsg`` is the host's. So each GPU worker gets what a sim node
gets (:mod:`gpucatalog.clusters.sim.nodefs`), at ``/var/lib/gpu-catalog-node``:
``usr/bin/nvidia-smi`` printing the node's readings from ``sim/``, ``dev/kmsg`` (a file),
``sys/class/infiniband``, and ``sim/hw.json`` (what the DRA stand-in publishes). A bundle's kind
profile points gpu-health's agent (``nvidiaSmi``, its ``hostPaths``) and the DRA driver's
``driverRoot`` there, so the real agent in a real pod reads them.

The provider keeps the master copy on the host (``<state>/nodes/<node>``); :func:`inject` edits
it with the sim's own fault code and copies the result into the node. The kernel log is
rewritten in place, never replaced: a pod that mounts that one file keeps its inode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpucatalog.clusters import shapes
from gpucatalog.clusters.sim import faults, nodefs, nvidiasmi
from gpucatalog.core import executor

NODE_ROOT = "/var/lib/gpu-catalog-node"
KMSG = "dev/kmsg"
SYNCED = ("sim", "sys", "usr")  # every folder of the node folder but dev/, whose one file is the kernel log


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
        executor.run(["docker", "cp", folder, f"{node}:{NODE_ROOT}"], env=env, timeout=60)


def sync(node: str, state: Path, env: dict[str, str]) -> None:
    """Copy the host's copy of ``node``'s folder into the node (after a fault changed it)."""
    folder = host_dir(state, node)
    for sub in SYNCED:
        if (folder / sub).is_dir():
            executor.run(["docker", "cp", folder / sub, f"{node}:{NODE_ROOT}/"], env=env, timeout=60)
    executor.run(["docker", "exec", "-i", node, "cp", "/dev/stdin", f"{NODE_ROOT}/{KMSG}"],
                 input=(folder / KMSG).read_text(), env=env, timeout=60)


def inject(node: str, kind: str, state: Path, env: dict[str, str], **kw: Any) -> str:
    """One fault (the sim's kinds, :data:`gpucatalog.clusters.sim.faults.KINDS`) on ``node``."""
    what = faults.inject(host_dir(state, node), kind, **kw)
    sync(node, state, env)
    return what
