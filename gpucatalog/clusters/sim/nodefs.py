"""A simulated node's folder: what the real GPU-node probes read, seeded healthy from its shape.

Layout of ``<state>/nodes/<node>/`` (the node's "/" for hostPath volumes of sim-kubelet pods):

    dev/kmsg                                    kernel log records (``/dev/kmsg`` format)
    sys/class/infiniband/<dev>/ports/1/state    e.g. ``4: ACTIVE``
    sys/class/infiniband/<dev>/ports/1/phys_state, rate, link_layer
    usr/bin/nvidia-smi                          the sim node agent's nvidia-smi (see nodeagent)
    sim/nvidia-smi-q-x.xml                      what ``nvidia-smi -q -x`` prints
    sim/nvlink-status.txt                       what ``nvidia-smi nvlink -s`` prints
    sim/shape.json                              the expected (healthy) facts of the node shape
    sim/hw.json                                 current simulated hardware state (faults edit it)
    sim/busy.json                               GPUs running work (the sim node agent writes it)

``seed`` writes it healthy; ``render`` rewrites the readings from ``sim/hw.json`` after
``faults`` changed it. A GPU reads as a real one does: idle (P8, 0 %, PCIe link down-trained to
gen 1) unless work runs on it (``busy.json``) or a fault holds it busy, then P0 at its trained
link. Writers hold ``locked``. Called by ``cluster.up``, ``faults`` and ``nodeagent``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpucatalog.clusters.shapes import Shape
from gpucatalog.clusters.sim import nodeagent


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


IDLE_LINK_GEN = 1  # what an idle GPU's link down-trains to (real P8 dumps all read gen 1)


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
        nodeagent.write_nvidia_smi(node_dir, final)


def render(node_dir: Path, shape: Shape, hw: dict[str, Any]) -> None:
    """Write every reading file from the hardware state ``hw``."""
    if shape.gpu is not None:
        xml = nvidia_smi_xml(shape, hw, busy_gpus(node_dir))
        tmp = node_dir / "sim" / "nvidia-smi-q-x.xml.tmp"
        tmp.write_text(xml)
        tmp.replace(node_dir / "sim" / "nvidia-smi-q-x.xml")
        (node_dir / "sim" / "nvlink-status.txt").write_text(nvlink_status(shape, hw))
    for dev, port in hw["infiniband"].items():
        pdir = node_dir / "sys" / "class" / "infiniband" / dev / "ports" / "1"
        pdir.mkdir(parents=True, exist_ok=True)
        (pdir / "state").write_text(port["state"] + "\n")
        (pdir / "phys_state").write_text(port["phys_state"] + "\n")
        (pdir / "rate").write_text(port["rate"] + "\n")
        (pdir / "link_layer").write_text("InfiniBand\n")


def _sub(parent: ET.Element, tag: str, text: str | int | None = None) -> ET.Element:
    e = ET.SubElement(parent, tag)
    if text is not None:
        e.text = str(text)
    return e


def _yes(b: bool) -> str:
    return "Yes" if b else "No"


def nvidia_smi_xml(shape: Shape, hw: dict[str, Any], work: set[int] | None = None) -> str:
    """``nvidia-smi -q -x`` shaped output (element names of nvsmi_device_v12.dtd); GPUs in
    ``work`` (or held busy by a fault) read busy, the others idle."""
    g = shape.gpu
    assert g is not None
    root = ET.Element("nvidia_smi_log")
    _sub(root, "timestamp", time.strftime("%a %b %d %H:%M:%S %Y"))
    _sub(root, "driver_version", g.driver_version)
    _sub(root, "cuda_version", g.cuda_version)
    present = [x for x in hw["gpus"] if not x["fallen_off_bus"]]
    _sub(root, "attached_gpus", len(present))
    for x in present:
        busy = bool(x.get("busy_fault")) or x["index"] in (work or set())
        link_gen = x["pcie_gen_current"] if busy else min(IDLE_LINK_GEN, x["pcie_gen_current"])
        gpu = ET.SubElement(root, "gpu", id=x["bus_id"])
        _sub(gpu, "product_name", g.name)
        _sub(gpu, "product_brand", "NVIDIA")
        _sub(gpu, "product_architecture", g.family.capitalize())
        _sub(gpu, "uuid", x["uuid"])
        _sub(gpu, "minor_number", x["index"])
        pci = _sub(gpu, "pci")
        bus = x["bus_id"].split(":")[1]
        _sub(pci, "pci_bus", bus)
        _sub(pci, "pci_device", "00")
        _sub(pci, "pci_domain", "0000")
        _sub(pci, "pci_device_id", g.pci_device_id[2:])
        _sub(pci, "pci_bus_id", x["bus_id"])
        link = _sub(pci, "pci_gpu_link_info")
        gen = _sub(link, "pcie_gen")
        _sub(gen, "max_link_gen", g.pcie_gen)
        _sub(gen, "current_link_gen", link_gen)
        _sub(gen, "device_current_link_gen", link_gen)
        _sub(gen, "max_device_link_gen", g.pcie_gen)
        _sub(gen, "max_host_link_gen", g.pcie_gen)
        widths = _sub(link, "link_widths")
        _sub(widths, "max_link_width", f"{g.pcie_width}x")
        _sub(widths, "current_link_width", f"{x['pcie_width_current']}x")
        _sub(pci, "replay_counter", 0)
        _sub(pci, "replay_rollover_counter", 0)
        _sub(gpu, "performance_state", "P0" if busy else "P8")
        fb = _sub(gpu, "fb_memory_usage")
        _sub(fb, "total", f"{g.memory_mib} MiB")
        _sub(fb, "reserved", "0 MiB")
        _sub(fb, "used", "0 MiB")
        _sub(fb, "free", f"{g.memory_mib} MiB")
        util = _sub(gpu, "utilization")
        _sub(util, "gpu_util", "93 %" if busy else "0 %")
        _sub(util, "memory_util", "41 %" if busy else "0 %")
        mode = _sub(gpu, "ecc_mode")
        _sub(mode, "current_ecc", "Enabled")
        _sub(mode, "pending_ecc", "Enabled")
        ecc = _sub(gpu, "ecc_errors")
        for scope in ("volatile", "aggregate"):
            s = _sub(ecc, scope)
            _sub(s, "sram_correctable", 0)
            _sub(s, "sram_uncorrectable_parity", 0)
            _sub(s, "sram_uncorrectable_secded", 0)
            _sub(s, "dram_correctable", x["ecc_dram_correctable"])
            _sub(s, "dram_uncorrectable", x["ecc_dram_uncorrectable"])
            if scope == "aggregate":
                _sub(s, "sram_threshold_exceeded", "No")
        rp = _sub(gpu, "retired_pages")
        for k in ("multiple_single_bit_retirement", "double_bit_retirement"):
            _sub(_sub(rp, k), "retired_count", "N/A")
        _sub(rp, "pending_blacklist", "N/A")
        _sub(rp, "pending_retirement", "N/A")
        rr = _sub(gpu, "remapped_rows")
        _sub(rr, "remapped_row_corr", x["remapped_corr"])
        _sub(rr, "remapped_row_unc", x["remapped_unc"])
        _sub(rr, "remapped_row_pending", _yes(x["remap_pending"]))
        _sub(rr, "remapped_row_failure", _yes(x["remap_failure"]))
        hist = _sub(rr, "row_remapper_histogram")
        used = x["remapped_corr"] + x["remapped_unc"]
        _sub(hist, "row_remapper_histogram_max", f"{g.row_remapper_banks - used} bank(s)")
        _sub(hist, "row_remapper_histogram_high", f"{used} bank(s)")
        _sub(hist, "row_remapper_histogram_partial", "0 bank(s)")
        _sub(hist, "row_remapper_histogram_low", "0 bank(s)")
        _sub(hist, "row_remapper_histogram_none", "0 bank(s)")
        reset_needed = x["remap_pending"]
        _sub(gpu, "gpu_recovery_action", "GPU Reset Required" if reset_needed else "None")
        rs = _sub(gpu, "gpu_reset_status")
        _sub(rs, "reset_required", _yes(reset_needed))
        _sub(rs, "drain_and_reset_recommended", _yes(reset_needed))
        # Not in NVIDIA's DTD: per-link NVLink state, so XML-only probes need no second command.
        # The faithful source is `nvidia-smi nvlink -s` (sim/nvlink-status.txt).
        nv = _sub(gpu, "nvlink_links_sim")
        for link_id in range(g.nvlink_links):
            down = link_id in x["nvlink_down"]
            ln = ET.SubElement(nv, "link", id=str(link_id))
            _sub(ln, "state", "Inactive" if down else "Active")
            _sub(ln, "speed", "<inactive>" if down else f"{g.nvlink_speed_gbps:.3f} GB/s")
    ET.indent(root)
    return '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n' + ET.tostring(
        root, encoding="unicode"
    ) + "\n"


def nvlink_status(shape: Shape, hw: dict[str, Any]) -> str:
    """``nvidia-smi nvlink -s`` text: per GPU a header line, then ``Link N: <speed>|<inactive>``."""
    g = shape.gpu
    assert g is not None
    lines = []
    for x in hw["gpus"]:
        if x["fallen_off_bus"]:
            continue
        lines.append(f"GPU {x['index']}: {g.name} (UUID: {x['uuid']})")
        for link_id in range(g.nvlink_links):
            speed = "<inactive>" if link_id in x["nvlink_down"] else f"{g.nvlink_speed_gbps:.3f} GB/s"
            lines.append(f"\t Link {link_id}: {speed}")
    return "\n".join(lines) + "\n"
