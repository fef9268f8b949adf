"""Pure parser for ``nvidia-smi -q -x`` (XML, ``nvsmi_device_v12.dtd`` and earlier).

Extracts per GPU what the checks compare: product, UUID, PCI bus id, performance state and GPU
utilisation (whether the GPU is busy), PCIe current/max link generation and width (the link's
maximum and, on newer drivers, the GPU's and the host's own maxima), row-remapping counters and
flags, volatile uncorrectable ECC, and the driver's GPU recovery action; and what the metrics
endpoint exports besides: frame-buffer memory used/total, GPU temperature, power draw and limit.
``N/A`` and missing fields become ``None`` (older drivers, MIG).
Truncated or non-XML output raises :class:`ProbeError`. Called by the nvidia-smi probe.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from gpucatalog.gpuhealth import pci
from gpucatalog.gpuhealth.errors import ProbeError

PROBE = "nvidia-smi"
MAX_BYTES = 32 * 1024 * 1024  # a real 8-GPU dump is ~100 KiB; refuse pathological input


@dataclass(frozen=True)
class GpuReading:
    index: int
    product: str
    uuid: str
    pci_bus_id: str
    pcie_gen_current: int | None
    pcie_gen_max: int | None  # max_link_gen: what the link can train to (GPU and host side)
    pcie_width_current: int | None
    pcie_width_max: int | None
    remap_correctable: int | None
    remap_uncorrectable: int | None
    remap_pending: bool | None
    remap_failure: bool | None
    ecc_volatile_uncorrectable: int | None
    recovery_action: str | None
    performance_state: str | None = None  # "P0" (full power) … "P12"; None when not reported
    gpu_util_percent: int | None = None
    pcie_gen_max_device: int | None = None  # max_device_link_gen: the GPU's own maximum
    pcie_gen_max_host: int | None = None  # max_host_link_gen: the host port's maximum
    memory_total_mib: int | None = None  # fb_memory_usage/total
    memory_used_mib: int | None = None  # fb_memory_usage/used
    temperature_c: int | None = None  # temperature/gpu_temp
    power_draw_w: float | None = None  # power_draw (R535-), else instant_power_draw (R550+)
    power_limit_w: float | None = None  # current_power_limit (gpu_power_readings), else enforced_power_limit


@dataclass(frozen=True)
class SmiReading:
    driver_version: str
    attached_gpus: int
    gpus: tuple[GpuReading, ...]


def _text(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in ("", "N/A", "[N/A]", "Unknown Error") else value


def _int(el: ET.Element | None, path: str) -> int | None:
    value = _text(el, path)
    if value is None:
        return None
    # "16x" (link width), "64 bank(s)" — keep the leading integer
    digits = ""
    for ch in value:
        if ch.isdigit():
            digits += ch
        else:
            break
    return int(digits) if digits else None


def _float(el: ET.Element | None, path: str) -> float | None:
    """``"67.03 W"`` -> 67.03; ``None`` when absent, ``N/A`` or not a number."""
    value = _text(el, path)
    if value is None:
        return None
    try:
        return float(value.split()[0])
    except (ValueError, IndexError):
        return None


def _power(gpu: ET.Element) -> tuple[float | None, float | None]:
    """(draw, limit) in watts. Drivers from R525 print ``gpu_power_readings`` (R550 and later
    split the draw into ``instant_``/``average_power_draw``); older ones ``power_readings`` with
    ``power_draw``/``enforced_power_limit``. The board's own readings only (not the module's)."""
    for section in ("gpu_power_readings", "power_readings"):
        el = gpu.find(section)
        if el is None:
            continue
        draw = next((v for v in (_float(el, n) for n in ("power_draw", "instant_power_draw", "average_power_draw"))
                     if v is not None), None)
        limit = next((v for v in (_float(el, n) for n in ("current_power_limit", "enforced_power_limit", "power_limit"))
                      if v is not None), None)
        return draw, limit
    return None, None


def _bool(el: ET.Element | None, path: str) -> bool | None:
    value = _text(el, path)
    if value is None:
        return None
    low = value.lower()
    if low in ("yes", "true", "1"):
        return True
    if low in ("no", "false", "0"):
        return False
    return None


def _ecc_unc(gpu: ET.Element) -> int | None:
    vol = gpu.find("ecc_errors/volatile")
    if vol is None:
        return None
    # Hopper drivers: <dram_uncorrectable>, <sram_uncorrectable[_parity|_secded]>; older: <double_bit><total>
    names = ("dram_uncorrectable", "sram_uncorrectable", "sram_uncorrectable_parity",
             "sram_uncorrectable_secded", "double_bit/total")
    parts = [_int(vol, n) for n in names]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def _index(gpu: ET.Element, position: int) -> int:
    minor = _int(gpu, "minor_number")
    return minor if minor is not None else position


def parse(xml_text: str) -> SmiReading:
    """Parse one ``nvidia-smi -q -x`` document; raise ``ProbeError`` naming what was wrong."""
    if len(xml_text) > MAX_BYTES:
        raise ProbeError(PROBE, f"output is {len(xml_text)} bytes, over the {MAX_BYTES} byte limit")
    if not xml_text.strip():
        raise ProbeError(PROBE, "empty output")
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise ProbeError(PROBE, f"output is not valid XML ({exc}); first bytes: {xml_text[:80]!r}") from exc
    if root.tag != "nvidia_smi_log":
        raise ProbeError(PROBE, f"root element is <{root.tag}>, expected <nvidia_smi_log>")
    gpus = []
    for idx, gpu in enumerate(root.findall("gpu")):
        bus = gpu.get("id") or _text(gpu, "pci/pci_bus_id") or ""
        link = gpu.find("pci/pci_gpu_link_info")
        rows = gpu.find("remapped_rows")
        draw, limit = _power(gpu)
        gpus.append(
            GpuReading(
                index=_index(gpu, idx),
                product=_text(gpu, "product_name") or "unknown",
                uuid=_text(gpu, "uuid") or "",
                pci_bus_id=pci.normalize(bus),
                pcie_gen_current=_int(link, "pcie_gen/current_link_gen"),
                pcie_gen_max=_int(link, "pcie_gen/max_link_gen"),
                pcie_width_current=_int(link, "link_widths/current_link_width"),
                pcie_width_max=_int(link, "link_widths/max_link_width"),
                remap_correctable=_int(rows, "remapped_row_corr"),
                remap_uncorrectable=_int(rows, "remapped_row_unc"),
                remap_pending=_bool(rows, "remapped_row_pending"),
                remap_failure=_bool(rows, "remapped_row_failure"),
                ecc_volatile_uncorrectable=_ecc_unc(gpu),
                recovery_action=_text(gpu, "gpu_recovery_action"),
                performance_state=_text(gpu, "performance_state"),
                gpu_util_percent=_int(gpu, "utilization/gpu_util"),
                pcie_gen_max_device=_int(link, "pcie_gen/max_device_link_gen"),
                pcie_gen_max_host=_int(link, "pcie_gen/max_host_link_gen"),
                memory_total_mib=_int(gpu, "fb_memory_usage/total"),
                memory_used_mib=_int(gpu, "fb_memory_usage/used"),
                temperature_c=_int(gpu, "temperature/gpu_temp"),
                power_draw_w=draw,
                power_limit_w=limit,
            )
        )
    attached = _int(root, "attached_gpus")
    return SmiReading(
        driver_version=_text(root, "driver_version") or "unknown",
        attached_gpus=attached if attached is not None else len(gpus),
        gpus=tuple(gpus),
    )
