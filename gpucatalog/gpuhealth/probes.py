"""Probes: read what a GPU node exposes, from a configurable host root, and return findings.

The same code reads a real node (``/host`` = the node's ``/`` mounted into the agent pod) and a
simulated node folder (the sim kubelet maps the pod's hostPaths there). Every probe either
returns a reading or raises :class:`ProbeError`; :func:`observe` turns those into one
:class:`Observation`, so garbage input never stops the agent. Called by the agent and ``verify``.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gpucatalog.gpuhealth import checks, hostexec, parse_ib, parse_kmsg, parse_nvlink, parse_nvsmi, pcie
from gpucatalog.gpuhealth.errors import ProbeError
from gpucatalog.gpuhealth.findings import Expectations, Family, Observation
from gpucatalog.gpuhealth.xidpolicy import Action, XidPolicy

KMSG_MAX_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ProbeConfig:
    kmsg_path: Path
    sys_root: Path
    nvidia_smi: tuple[str, ...]
    expect: Expectations
    xid_policy: XidPolicy = field(default_factory=XidPolicy)
    reason_actions: dict[str, Action] | None = None
    command_timeout: float = 30.0
    pcie_rules: pcie.PcieRules = field(default_factory=pcie.PcieRules)

    @classmethod
    def under_host_root(
        cls,
        host_root: Path,
        expect: Expectations,
        *,
        kmsg_path: Path | None = None,
        sys_root: Path | None = None,
        nvidia_smi: tuple[str, ...] = ("nvidia-smi",),
        xid_policy: XidPolicy | None = None,
        reason_actions: dict[str, Action] | None = None,
        pcie_rules: pcie.PcieRules | None = None,
    ) -> ProbeConfig:
        return cls(
            kmsg_path=kmsg_path or host_root / "dev" / "kmsg",
            sys_root=sys_root or host_root / "sys",
            nvidia_smi=nvidia_smi,
            expect=expect,
            xid_policy=xid_policy or XidPolicy(),
            reason_actions=reason_actions,
            pcie_rules=pcie_rules or pcie.PcieRules(),
        )


def read_kmsg(path: Path) -> str:
    """Whole kernel log: a regular file is read as text; the ``/dev/kmsg`` character device is
    drained record by record from the start of the ring buffer (non-blocking)."""
    try:
        st = path.stat()
    except OSError as exc:
        raise ProbeError("kmsg", f"cannot read {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISCHR(st.st_mode):
        try:
            with path.open("rb") as fh:
                data = fh.read(KMSG_MAX_BYTES + 1)
        except OSError as exc:
            raise ProbeError("kmsg", f"cannot read {path}: {exc.strerror or exc}") from exc
        # keep the newest part when a log is larger than the limit
        return data[-KMSG_MAX_BYTES:].decode("utf-8", errors="replace")
    records: list[str] = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise ProbeError("kmsg", f"cannot open {path}: {exc.strerror or exc}") from exc
    try:
        while True:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten while reading: skip ahead
                    continue
                raise ProbeError("kmsg", f"reading {path}: {exc.strerror or exc}") from exc
            if not rec:
                break
            records.append(rec.decode("utf-8", errors="replace").rstrip("\n"))
    finally:
        os.close(fd)
    return "\n".join(records)


def read_smi(cfg: ProbeConfig) -> parse_nvsmi.SmiReading:
    try:
        res = hostexec.run([*cfg.nvidia_smi, "-q", "-x"], timeout=cfg.command_timeout)
    except hostexec.CommandError as exc:
        raise ProbeError("nvidia-smi", str(exc)) from exc
    if res.returncode != 0 and not res.stdout.strip():
        raise ProbeError("nvidia-smi", f"exit {res.returncode}: {(res.stderr or res.stdout).strip()[:200]}")
    # nvidia-smi exits non-zero when a GPU is lost but still prints the others: parse what came
    return parse_nvsmi.parse(res.stdout)


def read_nvlink(cfg: ProbeConfig) -> list[parse_nvlink.NvlinkGpu]:
    try:
        res = hostexec.run([*cfg.nvidia_smi, "nvlink", "-s"], timeout=cfg.command_timeout)
    except hostexec.CommandError as exc:
        raise ProbeError("nvidia-smi nvlink", str(exc)) from exc
    return parse_nvlink.parse(res.stdout)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ProbeError("infiniband", f"cannot read {path}: {exc.strerror or exc}") from exc


def read_ib(sys_root: Path) -> list[checks.IbPort]:
    """Every port under ``class/infiniband``. The kernel refuses to read ``rate`` (EINVAL) when a
    port has no valid active width, which happens on a port that is down: the rate of a port that
    is not ACTIVE is never judged, so it is then recorded as unknown instead of failing the probe
    (and hiding the port that is down)."""
    base = sys_root / "class" / "infiniband"
    if not base.is_dir():
        return []
    ports = []
    for dev in sorted(base.iterdir()):
        pdir = dev / "ports"
        if not pdir.is_dir():
            continue
        for port in sorted(pdir.iterdir(), key=lambda p: p.name):
            layer_file = port / "link_layer"
            layer = _read(layer_file).strip() if layer_file.exists() else "InfiniBand"
            state = parse_ib.parse_state(_read(port / "state"))
            try:
                rate: parse_ib.PortRate | None = parse_ib.parse_rate(_read(port / "rate"))
            except ProbeError:
                if state.name in checks.UP_STATES:
                    raise
                rate = None
            ports.append(checks.IbPort(device=dev.name, port=port.name, state=state, rate=rate, link_layer=layer))
    return ports


def observe(
    cfg: ProbeConfig,
    known_gpus: dict[str, tuple[int, str]] | None = None,
    links: pcie.LinkHistory | None = None,
) -> Observation:
    """Run every probe; a failing probe is recorded in ``probe_errors`` and the others still run.

    ``known_gpus`` (PCI -> (index, UUID)) and ``links`` (PCIe readings under load) are the
    caller's memory of earlier cycles, updated in place: an XID of a GPU that has since fallen
    off the bus still names that GPU, and a PCIe shortfall counts over consecutive busy readings.
    """
    obs = Observation()
    gpus = known_gpus if known_gpus is not None else {}
    try:
        smi = obs.smi = read_smi(cfg)
        gpus.update(checks.gpu_map(smi))
        obs.findings += checks.check_smi(smi, cfg.expect, cfg.reason_actions)
        link_findings, link_notes = pcie.judge(smi, cfg.expect, cfg.pcie_rules,
                                               links if links is not None else pcie.LinkHistory(),
                                               cfg.reason_actions)
        obs.findings += link_findings
        if link_notes:
            obs.notes[Family.PCIE] = link_notes
    except ProbeError as exc:
        obs.probe_errors["nvidia-smi"] = exc.detail
    try:
        scan = parse_kmsg.parse(read_kmsg(cfg.kmsg_path))
        uuids = {pci: uuid for pci, (_, uuid) in gpus.items()}
        obs.xids = parse_kmsg.active_xids(scan, uuids)
        obs.findings += checks.check_xids(obs.xids, cfg.xid_policy, gpus)
        obs.findings += checks.check_unparsed_xids(scan.unparsed, cfg.reason_actions)
    except ProbeError as exc:
        obs.probe_errors["kmsg"] = exc.detail
    if cfg.expect.nvlinks_per_gpu is not None:
        try:
            obs.findings += checks.check_nvlink(read_nvlink(cfg), cfg.expect, cfg.reason_actions)
        except ProbeError as exc:
            obs.probe_errors["nvidia-smi nvlink"] = exc.detail
    try:
        obs.findings += checks.check_ib(read_ib(cfg.sys_root), cfg.expect, cfg.reason_actions)
    except ProbeError as exc:
        obs.probe_errors["infiniband"] = exc.detail
    return obs
