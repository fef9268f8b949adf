"""The real-data corpus of ``nvidia-smi -q -x`` dumps, their platforms, and edited variants.

The dumps (twelve real machines, one GPU each) live OUTSIDE the repository, in
``<repository's parent>/shared/data/nvidia-smi/`` (override: ``GPU_HEALTH_SMI_CORPUS=DIR``); they
are read there, never copied here. ``data/smi_platforms.yaml`` says what each dump's platform
expects (the node shape). A *variant* is one real dump edited the way a fault would change it
(row remap pending, remap failure, volatile uncorrectable ECC, a x4 link while busy, a gen 1 link
while busy over several readings), with the one finding and action it must yield.

Used by tests/gpuhealth/test_smi_corpus.py and bench/gpuhealth_smi_corpus.py.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from gpucatalog.gpuhealth import checks, parse_nvsmi, pcie
from gpucatalog.gpuhealth.findings import Expectations, Family, Finding
from gpucatalog.gpuhealth.xidpolicy import Action

ENV = "GPU_HEALTH_SMI_CORPUS"
REPO = Path(__file__).resolve().parents[2]
PLATFORMS = Path(__file__).parent / "data" / "smi_platforms.yaml"


def corpus_dir() -> Path:
    return Path(os.environ.get(ENV) or REPO.parent / "shared" / "data" / "nvidia-smi")


def dumps() -> list[Path]:
    return sorted(corpus_dir().glob("*.xml"))


def platforms() -> dict[str, Expectations]:
    raw = yaml.safe_load(PLATFORMS.read_text())
    return {name: Expectations(gpu_count=p["gpus"], pcie_gen=p["pcie_gen"], pcie_width=p["pcie_width"])
            for name, p in raw.items()}


def judge(xml: str, expect: Expectations, rules: pcie.PcieRules, readings: int = 1) -> list[Finding]:
    """What the agent reports after seeing the same nvidia-smi output ``readings`` times in a row."""
    history = pcie.LinkHistory()
    found: list[Finding] = []
    for _ in range(readings):
        smi = parse_nvsmi.parse(xml)
        links, _notes = pcie.judge(smi, expect, rules, history)
        found = checks.check_smi(smi, expect) + links
    return found


@dataclass(frozen=True)
class Variant:
    dump: str
    name: str
    xml: str
    family: Family
    reason: str
    action: Action
    readings: int  # consecutive readings the agent sees before the finding must be there


def _set(parent: ET.Element, path: str, value: str) -> bool:
    el = parent.find(path)
    if el is None:
        return False
    el.text = value
    return True


def _remap(gpu: ET.Element, field: str) -> bool:
    rows = gpu.find("remapped_rows")
    if rows is None:
        return False  # pre-Ampere driver/GPU: no row remapper to report on
    if len(rows) == 0:  # "N/A" (e.g. MIG on, or no data yet): the driver's full block instead
        rows.text = None
        for tag in ("remapped_row_corr", "remapped_row_unc"):
            ET.SubElement(rows, tag).text = "0"
        for tag in ("remapped_row_pending", "remapped_row_failure"):
            ET.SubElement(rows, tag).text = "No"
    return _set(rows, field, "Yes")


def _ecc(gpu: ET.Element) -> bool:
    vol = gpu.find("ecc_errors/volatile")
    if vol is None:
        return False
    agg = gpu.find("ecc_errors/aggregate")
    done = False
    for scope in (vol, agg):
        if scope is None:
            continue
        if scope.find("dram_uncorrectable") is not None:  # Ampere and later layout
            done |= _set(scope, "dram_uncorrectable", "2")
        elif scope.find("double_bit/total") is not None:  # Pascal/Volta layout
            _set(scope, "double_bit/device_memory", "2")
            done |= _set(scope, "double_bit/total", "2")
    return done


def _busy_link(gpu: ET.Element, gen: int, width: int) -> bool:
    ok = _set(gpu, "performance_state", "P0")
    ok &= _set(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen", str(gen))
    ok &= _set(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width", f"{width}x")
    _set(gpu, "pci/pci_gpu_link_info/pcie_gen/device_current_link_gen", str(gen))
    _set(gpu, "utilization/gpu_util", "97 %")
    return ok


def _edit(xml: str, change: Callable[[ET.Element], bool]) -> str | None:
    root = ET.fromstring(xml)
    gpu = root.find("gpu")
    if gpu is None or not change(gpu):
        return None
    return ET.tostring(root, encoding="unicode")


def busy_healthy(xml: str, expect: Expectations) -> str | None:
    """The same machine busy (P0) on the link its platform trains to: must yield no finding."""
    assert expect.pcie_gen is not None and expect.pcie_width is not None
    gen, width = expect.pcie_gen, expect.pcie_width
    return _edit(xml, lambda g: _busy_link(g, gen, width))


def idle_downshifted(xml: str) -> str | None:
    """The same machine idle (P8, 0 %) with its link dropped to gen 1, as idle GPUs report it:
    must yield no finding."""

    def change(g: ET.Element) -> bool:
        ok = _set(g, "performance_state", "P8") & _set(g, "pci/pci_gpu_link_info/pcie_gen/current_link_gen", "1")
        _set(g, "utilization/gpu_util", "0 %")
        return ok

    return _edit(xml, change)


def variants(dump: str, xml: str, expect: Expectations, rules: pcie.PcieRules) -> list[Variant]:
    """The fault variants that apply to this dump (a GPU with no row remapper cannot have a
    pending remap), each with the one finding it must yield."""
    assert expect.pcie_gen is not None and expect.pcie_width is not None
    gen, width = expect.pcie_gen, expect.pcie_width
    n = rules.busy_readings
    specs: list[tuple[str, Callable[[ET.Element], bool], Family, str, Action, int]] = [
        ("row-remap-pending", lambda g: _remap(g, "remapped_row_pending"),
         Family.MEMORY, "RowRemapPending", Action.RESET_GPU, 1),
        ("row-remap-failure", lambda g: _remap(g, "remapped_row_failure"),
         Family.MEMORY, "RowRemapFailure", Action.HARDWARE_REPAIR, 1),
        ("volatile-uncorrectable-ecc", _ecc, Family.MEMORY, "EccUncorrectableVolatile", Action.RESET_GPU, 1),
        ("x4-at-p0", lambda g: _busy_link(g, gen, 4), Family.PCIE, "PcieWidthDegraded", Action.HARDWARE_REPAIR, n),
        ("gen1-at-p0", lambda g: _busy_link(g, 1, width), Family.PCIE, "PcieGenDegraded", Action.HARDWARE_REPAIR, n),
    ]
    out = []
    for name, change, family, reason, action, readings in specs:
        edited = _edit(xml, change)
        if edited is not None:
            out.append(Variant(dump, name, edited, family, reason, action, readings))
    return out
