"""PCIe link judgement: a link is judged only when its reading means something.

NVIDIA documents that a GPU's *current* link generation and width "may be reduced when the GPU
is not in use": an idle GPU (performance state P8 and below) reports gen 1, sometimes a
narrower width, while nothing is wrong. So:

* the **current** link is compared with the node shape's expected gen/width only while the GPU
  is busy (performance state P0-P2, or utilisation at or above ``busy_util_percent``), and a
  shortfall becomes a finding only after ``busy_readings`` consecutive busy readings show it
  (hysteresis: a link retraining as load arrives, or one odd sample, is not a fault). Idle
  readings neither count nor reset that streak; they are recorded as notes, never as findings;
* the **maximum** the link can train to (``max_link_gen`` / ``max_link_width``, which include
  the host side) is compared whatever the load, with no hysteresis (it does not move with load):
  against the shape's expectation, or, without one, the link's maximum gen against the GPU's
  own maximum (``max_device_link_gen``). Without a shape value the current link is never judged:
  the GPU's own maximum says nothing about how the platform wires it (a x16 card in an x8 slot).

The node shape is the truth about the platform: an x8 platform expects width 8 and is not
degraded at x8. Called by :mod:`probes` each agent cycle; :class:`LinkHistory` is the agent's
memory between cycles (``verify`` starts with an empty one). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpucatalog.gpuhealth.findings import DEFAULT_REASON_ACTIONS, Expectations, Family, Finding
from gpucatalog.gpuhealth.parse_nvsmi import GpuReading, SmiReading
from gpucatalog.gpuhealth.xidpolicy import Action

BUSY_STATES = ("P0", "P1", "P2")


@dataclass(frozen=True)
class PcieRules:
    """How a current-link reading is judged (agent flags ``--pcie-busy-readings``/``-util``)."""

    busy_readings: int = 3  # consecutive busy readings below expectation before a finding
    busy_util_percent: int = 50  # GPU utilisation (%) that counts as busy at any P-state


@dataclass
class LinkHistory:
    """Per GPU (UUID, else PCI address) and dimension ("gen"/"width"): the number of consecutive
    busy readings below the shape's expectation."""

    streaks: dict[tuple[str, str], int] = field(default_factory=dict)


def busy(g: GpuReading, rules: PcieRules) -> bool:
    if g.performance_state in BUSY_STATES:
        return True
    return g.gpu_util_percent is not None and g.gpu_util_percent >= rules.busy_util_percent


def _load(g: GpuReading) -> str:
    util = f", util {g.gpu_util_percent} %" if g.gpu_util_percent is not None else ""
    return f"{g.performance_state or 'P-state unknown'}{util}"


def _subject(g: GpuReading) -> str:
    extra = ", ".join(p for p in (f"PCI {g.pci_bus_id}", g.uuid) if p)
    return f"GPU {g.index} ({extra})"


@dataclass(frozen=True)
class _Dim:
    name: str  # "gen" | "width"
    reason: str
    current: int | None
    link_max: int | None
    shape: int | None
    own_max: int | None  # the GPU's own maximum, used only when the shape has no value

    def show(self, v: int) -> str:
        return f"gen {v}" if self.name == "gen" else f"x{v}"


def _dims(g: GpuReading, expect: Expectations) -> tuple[_Dim, _Dim]:
    link_gen_max = g.pcie_gen_max
    if link_gen_max is None and g.pcie_gen_max_device is not None and g.pcie_gen_max_host is not None:
        link_gen_max = min(g.pcie_gen_max_device, g.pcie_gen_max_host)
    return (
        _Dim("gen", "PcieGenDegraded", g.pcie_gen_current, link_gen_max, expect.pcie_gen, g.pcie_gen_max_device),
        # no driver reports the GPU's own maximum width apart from the link's
        _Dim("width", "PcieWidthDegraded", g.pcie_width_current, g.pcie_width_max, expect.pcie_width, None),
    )


def judge(
    smi: SmiReading,
    expect: Expectations,
    rules: PcieRules,
    history: LinkHistory,
    actions: Mapping[str, Action] | None = None,
) -> tuple[list[Finding], list[str]]:
    """PCIe findings for one nvidia-smi reading, and notes on readings recorded but not judged.

    Updates ``history`` in place (one call per agent cycle)."""
    table = actions or DEFAULT_REASON_ACTIONS
    findings: list[Finding] = []
    notes: list[str] = []
    for g in smi.gpus:
        key = g.uuid or g.pci_bus_id
        subject = _subject(g)
        is_busy = busy(g, rules)
        for d in _dims(g, expect):
            act = table.get(d.reason, DEFAULT_REASON_ACTIONS[d.reason])
            want_max = d.shape if d.shape is not None else d.own_max
            if d.link_max is not None and want_max is not None and d.link_max < want_max:
                whose = "the node shape expects" if d.shape is not None else "the GPU itself supports"
                findings.append(Finding(Family.PCIE, d.reason, act, subject,
                                        f"PCIe link can train to {d.show(d.link_max)} at most (max_link_{d.name}, "
                                        f"GPU and host side), {whose} {d.show(want_max)}"))
                history.streaks.pop((key, d.name), None)
                continue
            if d.shape is None or d.current is None:
                continue
            below = d.current < d.shape
            if not is_busy:
                if below:
                    notes.append(f"{subject}: PCIe {d.show(d.current)} at {_load(g)} (idle), "
                                 f"shape expects {d.show(d.shape)}: not judged")
                continue
            if not below:
                history.streaks.pop((key, d.name), None)
                continue
            streak = history.streaks.get((key, d.name), 0) + 1
            history.streaks[(key, d.name)] = streak
            if streak < rules.busy_readings:
                notes.append(f"{subject}: PCIe {d.show(d.current)} at {_load(g)}, shape expects "
                             f"{d.show(d.shape)}: busy reading {streak} of {rules.busy_readings}")
                continue
            findings.append(Finding(Family.PCIE, d.reason, act, subject,
                                    f"PCIe link {d.show(d.current)} while busy ({_load(g)}) for {streak} "
                                    f"consecutive busy readings, the node shape expects {d.show(d.shape)}"))
    return findings, notes
