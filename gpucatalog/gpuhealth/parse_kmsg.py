"""Pure parser for the kernel log as the NVIDIA driver writes it (``/dev/kmsg`` records, dmesg or
journald lines): XID errors (plain and MIG forms), PCI->UUID announcements and the GPU-reset
outcome lines a reset job logs. Called by the agent's kmsg probe and by tests with fixtures.

Accepted shapes (prefixes such as ``6,1234,5678,-;`` or ``kernel: [16450076.43] `` are ignored)::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:3b:00): 13, GPU-I:05, GPU-CI:00, pid=7194, name=train, Graphics Exception …
    NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9). …
    NVRM: GPU at PCI:0000:03:00: GPU-455d8f70-2051-db6c-0430-5f8f5b9a5b2a
    GPU reset executed: GPU-455d8f70-2051-db6c-0430-5f8f5b9a5b2a, success: true
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpucatalog.gpuhealth import pci

_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)(?:\s+GPU-I:(?P<gi>\d+))?\):\s*(?P<xid>\d+)\s*(?:,\s*(?P<rest>.*))?$"
)
_GI = re.compile(r"(?:^|,\s*)GPU-I:\s*(\d+)")
_CI = re.compile(r"(?:^|,\s*)GPU-CI:\s*(\d+)")
_PID = re.compile(r"(?:^|,\s*)pid=('?<unknown>'?|\d+)")
_NAME = re.compile(r"(?:^|,\s*)name=([^,]*)")
_UUID_AT = re.compile(r"NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]+)")
_RESET = re.compile(r"GPU reset executed: (?P<uuid>GPU-[0-9a-fA-F-]+), success: (?P<ok>true|false)", re.I)
# Lines that merely look like XIDs but did not parse are kept so they can be reported raw.
_XID_LIKE = re.compile(r"NVRM: Xid")


@dataclass(frozen=True)
class XidEvent:
    line_no: int
    pci: str
    xid: int
    gpu_instance: int | None
    compute_instance: int | None
    pid: int | None
    process: str | None
    text: str
    raw: str


@dataclass(frozen=True)
class ResetRecord:
    line_no: int
    uuid: str
    success: bool


@dataclass
class KmsgScan:
    xids: list[XidEvent] = field(default_factory=list)
    resets: list[ResetRecord] = field(default_factory=list)
    uuid_by_pci: dict[str, str] = field(default_factory=dict)
    unparsed: list[str] = field(default_factory=list)


def _message(line: str) -> str:
    # /dev/kmsg records are "prio,seq,usec,flags;message"; continuation lines start with a space.
    if ";" in line:
        head, _, tail = line.partition(";")
        if re.fullmatch(r"\d+,\d+,\d+,[^;]*", head):
            return tail
    return line


def parse(text: str) -> KmsgScan:
    """Scan a whole kernel-log text; never raises on garbage (unknown lines are skipped)."""
    scan = KmsgScan()
    for no, raw_line in enumerate(text.splitlines(), start=1):
        line = _message(raw_line.rstrip("\r"))
        m = _XID.search(line)
        if m:
            rest = (m.group("rest") or "").strip()
            gi = m.group("gi")
            gim = _GI.search(rest)
            cim = _CI.search(rest)
            pidm = _PID.search(rest)
            namem = _NAME.search(rest)
            pid = pidm.group(1) if pidm else None
            scan.xids.append(
                XidEvent(
                    line_no=no,
                    pci=pci.normalize(m.group("pci")),
                    xid=int(m.group("xid")),
                    gpu_instance=int(gi) if gi else (int(gim.group(1)) if gim else None),
                    compute_instance=int(cim.group(1)) if cim else None,
                    pid=int(pid) if pid and pid.isdigit() else None,
                    process=namem.group(1).strip() if namem else None,
                    text=rest,
                    raw=line.strip(),
                )
            )
            continue
        u = _UUID_AT.search(line)
        if u:
            scan.uuid_by_pci[pci.normalize(u.group("pci"))] = u.group("uuid")
            continue
        r = _RESET.search(line)
        if r:
            scan.resets.append(ResetRecord(no, r.group("uuid"), r.group("ok").lower() == "true"))
            continue
        if _XID_LIKE.search(line):
            scan.unparsed.append(line.strip())
    return scan


def active_xids(scan: KmsgScan, uuid_by_pci: dict[str, str] | None = None) -> list[XidEvent]:
    """XIDs not cleared by a later successful reset of the same GPU.

    ``uuid_by_pci`` (e.g. from ``nvidia-smi``) completes the kernel log's own PCI->UUID lines.
    A reboot clears the kernel ring buffer, so XIDs from before a reboot are never seen again.
    """
    mapping = dict(uuid_by_pci or {})
    mapping.update(scan.uuid_by_pci)
    last_ok: dict[str, int] = {}
    for r in scan.resets:
        if r.success:
            last_ok[r.uuid] = max(last_ok.get(r.uuid, 0), r.line_no)
    out = []
    for ev in scan.xids:
        uuid = mapping.get(ev.pci)
        if uuid is not None and last_ok.get(uuid, 0) > ev.line_no:
            continue
        out.append(ev)
    return out
