"""A simulated node's folder: what the real GPU-node probes read, seeded healthy from its shape.

Layout of ``<state>/nodes/<node>/`` (the node's "/" for hostPath volumes of sim-kubelet pods):

    dev/kmsg                                    kernel log records (``/dev/kmsg`` format)
    sys/class/infiniband/<dev>/ports/1/state    e.g. ``4: ACTIVE``
    sys/class/infiniband/<dev>/ports/1/phys_state, rate, link_layer
    usr/bin/nvidia-smi                          the sim nvidia-smi (see nvidiasmi)
    sim/nvidia-smi-q-x.xml                      what ``nvidia-smi -q -x`` prints
    sim/nvlink-status.txt                       what ``nvidia-smi nvlink -s`` prints
    sim/shape.json                              the expected (healthy) facts of the node shape
    sim/hw.json                                 current simulated hardware state (faults edit it)
    sim/busy.json                               GPUs running work (the sim node agent writes it)

``seed`` writes it healthy; ``render`` rewrites the readings from ``sim/hw.json`` after
``faults`` changed it. A GPU reads as a real one does: idle (P8, 0 %, PCIe link down-trained to
gen 1) unless work runs on it (``busy.json``) or a fault holds it busy, then P0 at its trained
link (``nvidiasmi``). Writers hold ``locked``. Called by ``cluster.up``, ``faults`` and
``nodeagent``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpucatalog.clusters.shapes import Shape
from gpucatalog.clusters.sim import nvidiasmi


def gpu_uuid(cluster: str, node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpu-catalog-sim/{cluster}/{node}/{index}"))


def healthy_hw(shape: Shape, cluster: str, node: str) -> dict[str, Any]:
    gpus = []
    if shape.gpu is not None:
        g = shape.gpu
        for i in range(g.count):
            gpus.append({
                "index": i,
                "uuid": gpu_uuid(cluster, node, i),
                "bus_id": g.bus_id(i),
                "pcie_gen_current": g.pcie_gen,
                "pcie_width_current": g.pcie_width,
                "remapped_corr": 0,
                "remapped_unc": 0,
                "remap_pending": False,
                "remap_failure": False,
                "ecc_dram_uncorrectable": 0,
                "ecc_dram_correctable": 0,
                "nvlink_down": [],
                "fallen_off_bus": False,
                "busy_fault": False,  # a fault holds the GPU busy (pcie-downgrade)
            })
    ib = {}
    if shape.infiniband is not None:
        for dev in shape.infiniband.devices:
            ib[dev] = {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": shape.infiniband.rate}
    return {"gpus": gpus, "infiniband": ib, "kmsg_seq": 0}


def register(nodes_dir: Path, shape_of: dict[str, str]) -> None:
    """Record node -> shape names; folders are seeded on first use (fast start for 1,000 nodes)."""
    nodes_dir.mkdir(parents=True, exist_ok=True)
    index = nodes_dir / "index.json"
    known: dict[str, str] = json.loads(index.read_text()) if index.is_file() else {}
    known.update(shape_of)
    tmp = nodes_dir / "index.json.tmp"
    tmp.write_text(json.dumps(known))
    tmp.replace(index)


def shape_name(nodes_dir: Path, node: str) -> str | None:
    try:
        known: dict[str, str] = json.loads((nodes_dir / "index.json").read_text())
    except (OSError, ValueError):
        return None
    return known.get(node)


def ensure(nodes_dir: Path, node: str, cluster: str) -> Path | None:
    """The seeded folder of a sim node (seeding it now if needed); None if ``node`` is not one."""
    d = nodes_dir / node
    if (d / "sim" / "hw.json").is_file():
        return d
    name = shape_name(nodes_dir, node)
    if name is None:
        return None
    from gpucatalog.clusters import shapes

    tmp = nodes_dir / f".{node}.seeding.{os.getpid()}"
    seed(tmp, shapes.get(name), cluster, final_dir=d)
    try:
        tmp.rename(d)  # atomic: a concurrent seeder (kubelet vs CLI) loses the race harmlessly
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return d


@contextlib.contextmanager
def locked(node_dir: Path) -> Iterator[None]:
    """Serialise read-modify-render of a node folder between processes (faults, node agent)."""
    with open(node_dir / "sim" / ".lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def busy_gpus(node_dir: Path) -> set[int]:
    try:
        return set(json.loads((node_dir / "sim" / "busy.json").read_text())["gpus"])
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def set_work_busy(node_dir: Path, shape: Shape, gpus: set[int]) -> bool:
    """Mark which GPUs run work and re-render; False when nothing changed."""
    with locked(node_dir):
        if busy_gpus(node_dir) == gpus:
            return False
        (node_dir / "sim" / "busy.json").write_text(json.dumps({"gpus": sorted(gpus)}))
        render(node_dir, shape, load_hw(node_dir))
        return True


def load_hw(node_dir: Path) -> dict[str, Any]:
    hw: dict[str, Any] = json.loads((node_dir / "sim" / "hw.json").read_text())
    return hw


def save_hw(node_dir: Path, hw: dict[str, Any]) -> None:
    tmp = node_dir / "sim" / "hw.json.tmp"
    tmp.write_text(json.dumps(hw, indent=1))
    tmp.replace(node_dir / "sim" / "hw.json")


def seed(node_dir: Path, shape: Shape, cluster: str, final_dir: Path | None = None) -> None:
    """Create the node folder with healthy readings (overwrites any earlier state).

    ``final_dir``: where the folder will live when seeded elsewhere and renamed into place
    (the nvidia-smi script embeds that path); GPU UUIDs derive from its name.
    """
    final = final_dir or node_dir
    (node_dir / "sim").mkdir(parents=True, exist_ok=True)
    (node_dir / "dev").mkdir(exist_ok=True)
    (node_dir / "dev" / "kmsg").write_text("")
    (node_dir / "sim" / "shape.json").write_text(json.dumps(asdict(shape), indent=1))
    hw = healthy_hw(shape, cluster, final.name)
    save_hw(node_dir, hw)
    render(node_dir, shape, hw)
    if shape.gpu is not None:
        nvidiasmi.write_nvidia_smi(node_dir, final)


def render(node_dir: Path, shape: Shape, hw: dict[str, Any]) -> None:
    """Write every reading file from the hardware state ``hw``."""
    if shape.gpu is not None:
        xml = nvidiasmi.nvidia_smi_xml(shape, hw, busy_gpus(node_dir))
        tmp = node_dir / "sim" / "nvidia-smi-q-x.xml.tmp"
        tmp.write_text(xml)
        tmp.replace(node_dir / "sim" / "nvidia-smi-q-x.xml")
        (node_dir / "sim" / "nvlink-status.txt").write_text(nvidiasmi.nvlink_status(shape, hw))
    for dev, port in hw["infiniband"].items():
        pdir = node_dir / "sys" / "class" / "infiniband" / dev / "ports" / "1"
        pdir.mkdir(parents=True, exist_ok=True)
        (pdir / "state").write_text(port["state"] + "\n")
        (pdir / "phys_state").write_text(port["phys_state"] + "\n")
        (pdir / "rate").write_text(port["rate"] + "\n")
        (pdir / "link_layer").write_text("InfiniBand\n")
