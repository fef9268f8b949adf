"""Pure comparisons of parsed readings with the node shape's expected values -> findings.

XIDs, GPU count, memory (row remapping, volatile ECC), NVLink and InfiniBand; the PCIe link has
its own module (:mod:`pcie`) because it is judged only under load and over several readings.

Called by the agent (and the ``verify`` command) after each probe; no I/O here, so every rule is
tested with fixtures. Action per finding comes from the XID policy or ``reason_actions``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpucatalog.gpuhealth import parse_ib, parse_nvlink, parse_nvsmi
from gpucatalog.gpuhealth.findings import DEFAULT_REASON_ACTIONS, Expectations, Family, Finding
from gpucatalog.gpuhealth.parse_kmsg import XidEvent
from gpucatalog.gpuhealth.xidpolicy import Action, XidPolicy

UP_STATES = ("ACTIVE", "ACTIVE_DEFER")  # ACTIVE_DEFER: active, a state change deferred


@dataclass(frozen=True)
class IbPort:
    device: str
    port: str
    state: parse_ib.PortState
    rate: parse_ib.PortRate | None  # None: unreadable (only ever on a port that is not ACTIVE)
    link_layer: str = "InfiniBand"


def _act(reason: str, actions: Mapping[str, Action] | None) -> Action:
    table = actions or DEFAULT_REASON_ACTIONS
    return table.get(reason, DEFAULT_REASON_ACTIONS.get(reason, Action.HARDWARE_REPAIR))


def _gpu_subject(index: int | None, pci: str, uuid: str = "") -> str:
    who = f"GPU {index}" if index is not None else "GPU ?"
    extra = ", ".join(p for p in (f"PCI {pci}", uuid) if p)
    return f"{who} ({extra})"


def gpu_map(smi: parse_nvsmi.SmiReading | None) -> dict[str, tuple[int, str]]:
    """PCI bus id -> (GPU index, UUID) from one nvidia-smi reading."""
    return {g.pci_bus_id: (g.index, g.uuid) for g in smi.gpus} if smi else {}


def check_xids(
    events: Sequence[XidEvent], policy: XidPolicy, gpus: Mapping[str, tuple[int, str]] | None = None
) -> list[Finding]:
    """``gpus`` names the GPU of each XID; a GPU that fell off the bus is missing from the current
    nvidia-smi output, so the agent passes what it saw in earlier cycles too."""
    by_pci = gpus or {}
    out: list[Finding] = []
    for ev in events:
        info = policy.info(ev.xid)
        action = policy.action(ev.xid, ev.text)
        gpu = by_pci.get(ev.pci)
        subject = _gpu_subject(gpu[0] if gpu else None, ev.pci, gpu[1] if gpu else "")
        if ev.gpu_instance is not None:
            subject += f" MIG GI {ev.gpu_instance}" + (
                f" CI {ev.compute_instance}" if ev.compute_instance is not None else ""
            )
        if info.known:
            detail = (
                f"XID {ev.xid} {info.mnemonic} ({info.description}); catalog action "
                f"{info.bucket or 'none'}"
            )
        else:
            detail = f"XID {ev.xid} unknown to NVIDIA's catalog, default action from policy; line: {ev.raw}"
        if ev.process:
            detail += f"; pid={ev.pid} name={ev.process}"
        out.append(Finding(Family.XID, f"Xid{ev.xid}", action, subject, detail, xid=ev.xid, raw=ev.raw))
    return out


def check_unparsed_xids(lines: Sequence[str], actions: Mapping[str, Action] | None = None) -> list[Finding]:
    """A kernel-log line that says "NVRM: Xid" in a shape no parser rule knows is reported (an
    Event by default), never silently dropped: a new driver's format must be seen to be fixed."""
    return [Finding(Family.XID, "XidUnparsed", _act("XidUnparsed", actions), "node",
                    f"kernel log line looks like an XID but was not understood: {line[:300]}", raw=line)
            for line in lines]


def check_smi(
    smi: parse_nvsmi.SmiReading, expect: Expectations, actions: Mapping[str, Action] | None = None
) -> list[Finding]:
    """GPU count and memory health; the PCIe link is judged by :mod:`pcie` (it needs the load
    and the readings of earlier cycles)."""
    out: list[Finding] = []
    if expect.gpu_count is not None and len(smi.gpus) < expect.gpu_count:
        out.append(
            Finding(
                Family.COUNT,
                "GpuMissing",
                _act("GpuMissing", actions),
                "node",
                f"nvidia-smi lists {len(smi.gpus)} GPUs, the node shape expects {expect.gpu_count}",
            )
        )
    for g in smi.gpus:
        subj = _gpu_subject(g.index, g.pci_bus_id, g.uuid)

        def add(family: Family, reason: str, detail: str, subj: str = subj) -> None:
            out.append(Finding(family, reason, _act(reason, actions), subj, detail))

        if g.remap_failure:
            add(Family.MEMORY, "RowRemapFailure", "row remapping failure occurred (remapped_row_failure=Yes)")
        if g.remap_pending:
            add(Family.MEMORY, "RowRemapPending", "row remap pending: a GPU reset is needed to remap the row")
        if g.remap_uncorrectable:
            add(
                Family.MEMORY,
                "RowRemapUncorrectable",
                f"{g.remap_uncorrectable} rows remapped for uncorrectable errors",
            )
        if g.ecc_volatile_uncorrectable:
            add(
                Family.MEMORY,
                "EccUncorrectableVolatile",
                f"{g.ecc_volatile_uncorrectable} volatile uncorrectable ECC errors",
            )
    return out


def check_nvlink(
    gpus: Sequence[parse_nvlink.NvlinkGpu], expect: Expectations, actions: Mapping[str, Action] | None = None
) -> list[Finding]:
    if expect.nvlinks_per_gpu is None:
        return []
    out = []
    for g in gpus:
        if len(g.links_up) < expect.nvlinks_per_gpu:
            down = ",".join(str(n) for n in g.links_down) or "none listed"
            out.append(
                Finding(
                    Family.NVLINK,
                    "NvlinkDown",
                    _act("NvlinkDown", actions),
                    _gpu_subject(g.index, "", g.uuid),
                    f"{len(g.links_up)} of {expect.nvlinks_per_gpu} NVLink links up (down: {down})",
                )
            )
    return out


def check_ib(
    ports: Sequence[IbPort], expect: Expectations, actions: Mapping[str, Action] | None = None
) -> list[Finding]:
    out = []
    ib = [p for p in ports if p.link_layer.lower() != "ethernet"]
    if expect.ib_ports is not None and len(ib) < expect.ib_ports:
        out.append(
            Finding(
                Family.INFINIBAND,
                "InfinibandPortMissing",
                _act("InfinibandPortMissing", actions),
                "node",
                f"{len(ib)} InfiniBand ports found, the node shape expects {expect.ib_ports}",
            )
        )
    for p in ib:
        subj = f"{p.device} port {p.port}"
        if p.state.name not in UP_STATES:
            out.append(
                Finding(
                    Family.INFINIBAND,
                    "InfinibandPortDown",
                    _act("InfinibandPortDown", actions),
                    subj,
                    f"port state {p.state.code}: {p.state.name}, expected ACTIVE",
                )
            )
        elif expect.ib_rate_gbps is not None and p.rate is not None and p.rate.gbps < expect.ib_rate_gbps:
            shape = f" ({p.rate.width}X {p.rate.speed})" if p.rate.width else ""
            out.append(
                Finding(
                    Family.INFINIBAND,
                    "InfinibandRateDegraded",
                    _act("InfinibandRateDegraded", actions),
                    subj,
                    f"port rate {p.rate.gbps:g} Gb/sec{shape}, expected {expect.ib_rate_gbps:g} Gb/sec",
                )
            )
    return out
