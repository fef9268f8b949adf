"""SIM-ONLY ``nvidia-smi`` of a simulated node: the readings it prints and the program itself.

Nothing here is product code; it exists because the sim cluster has no GPUs. ``nvidia_smi_xml``
and ``nvlink_status`` turn a node's hardware state (``sim/hw.json``, see :mod:`.nodefs`) into
what ``nvidia-smi -q -x`` and ``nvidia-smi nvlink -s`` print; ``write_nvidia_smi`` writes the
node's ``usr/bin/nvidia-smi``, a shell script printing those files, so probes run the real
command path. Called by :mod:`.nodefs` (seed and render).
"""

from __future__ import annotations

import stat
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from gpucatalog.clusters.shapes import Shape

_SCRIPT = """#!/bin/sh
# SIM-ONLY nvidia-smi of a gpu-catalog simulated node: prints this node's simulated readings.
D='{sim_dir}'
case "$1" in
  nvlink)
    exec cat "$D/nvlink-status.txt" ;;
  -L|--list-gpus)
    exec sed -n 's/^GPU \\([0-9]*\\): \\(.*\\)$/GPU \\1: \\2/p' "$D/nvlink-status.txt" ;;
  -q|--query)
    if [ "$2" = "-x" ] || [ "$2" = "--xml-format" ]; then exec cat "$D/nvidia-smi-q-x.xml"; fi ;;
  -x)
    if [ "$2" = "-q" ]; then exec cat "$D/nvidia-smi-q-x.xml"; fi ;;
esac
echo "sim nvidia-smi supports: -q -x, -L, nvlink -s" >&2
exit 2
"""


def write_nvidia_smi(node_dir: Path, final_dir: Path | None = None) -> Path:
    path = node_dir / "usr" / "bin" / "nvidia-smi"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_SCRIPT.format(sim_dir=(final_dir or node_dir) / "sim"))
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _sub(parent: ET.Element, tag: str, text: str | int | None = None) -> ET.Element:
    e = ET.SubElement(parent, tag)
    if text is not None:
        e.text = str(text)
    return e


def _yes(b: bool) -> str:
    return "Yes" if b else "No"


IDLE_LINK_GEN = 1  # what an idle GPU's link down-trains to (real P8 dumps all read gen 1)
# Readings of an idle and a busy GPU: temperature in C, power as a share of the board's limit,
# frame-buffer memory in use as a share of it (in the range of the real dumps' idle P8 GPUs:
# 17-42 C, 4-22 % of their limit; a busy A100 in a published dump: 60-70 C).
IDLE_TEMP_C, BUSY_TEMP_C = 33, 64
IDLE_POWER_SHARE, BUSY_POWER_SHARE = 0.1, 0.72
BUSY_MEMORY_SHARE = 0.6


def nvidia_smi_xml(shape: Shape, hw: dict[str, Any], work: set[int] | None = None) -> str:
    """``nvidia-smi -q -x`` shaped output (element names of nvsmi_device_v12.dtd). GPUs in
    ``work`` (or held busy by a fault) read busy: P0, link at its trained gen; the others read as
    real idle GPUs do: P8, 0 %, link down-trained to gen 1."""
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
        used_mib = int(g.memory_mib * BUSY_MEMORY_SHARE) if busy else 0
        _sub(fb, "total", f"{g.memory_mib} MiB")
        _sub(fb, "reserved", "0 MiB")
        _sub(fb, "used", f"{used_mib} MiB")
        _sub(fb, "free", f"{g.memory_mib - used_mib} MiB")
        util = _sub(gpu, "utilization")
        _sub(util, "gpu_util", "93 %" if busy else "0 %")
        _sub(util, "memory_util", "41 %" if busy else "0 %")
        temp = _sub(gpu, "temperature")
        _sub(temp, "gpu_temp", f"{BUSY_TEMP_C if busy else IDLE_TEMP_C} C")
        power = _sub(gpu, "gpu_power_readings")
        _sub(power, "power_state", "P0" if busy else "P8")
        if g.power_limit_w is None:
            _sub(power, "power_draw", "N/A")
            _sub(power, "current_power_limit", "N/A")
        else:
            share = BUSY_POWER_SHARE if busy else IDLE_POWER_SHARE
            _sub(power, "power_draw", f"{g.power_limit_w * share:.2f} W")
            _sub(power, "current_power_limit", f"{g.power_limit_w:.2f} W")
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
