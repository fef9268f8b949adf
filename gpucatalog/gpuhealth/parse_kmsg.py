"""Pure parser for the kernel log as the NVIDIA driver writes it (``/dev/kmsg`` records, dmesg or
journald lines): XID errors (plain and MIG forms, every driver generation), the multi-line
"fallen off the bus" report that newer drivers print without an XID, PCI->UUID announcements and
the GPU-reset outcome lines a reset job logs. Called by the agent's kmsg probe and by tests.

Accepted shapes (prefixes such as ``6,1234,5678,-;``, ``kernel: [16450076.43] `` or
``[Wed Jul 31 23:14:18 2024] `` are ignored; real published examples, with their sources, are in
tests/gpuhealth/data/public_driver_output.yaml)::

    NVRM: Xid (0000:03:00): 14, Channel 00000001                       (R3xx-era drivers: no "PCI:")
    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
    NVRM: Xid (PCI:0000:c1:00): 31, pid=12890, Ch 0000003b, …           (no name=)
    NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: …     (MIG: GPU instance)
    NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:00): 43, pid=…, name=…    (MIG: and compute instance)
    NVRM: Xid (PCI:0000:3b:00): 13, GPU-I:05, GPU-CI:00, pid=7194, …    (instance after the code)
    NVRM: The NVIDIA GPU 0000:b3:00.0 / … / NVRM: fallen off the bus …  (no XID: read as XID 79)
    NVRM: GPU at PCI:0000:03:00: GPU-455d8f70-2051-db6c-0430-5f8f5b9a5b2a   ("PCI:" optional)
    GPU reset executed: GPU-455d8f70-2051-db6c-0430-5f8f5b9a5b2a, success: true
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpucatalog.gpuhealth import pci

# Lenient inside the parentheses (every driver generation puts something else there), strict on
# the code that follows them.
_XID = re.compile(r"NVRM: Xid \((?P<inside>[^)]*)\):?\s*(?P<xid>\d+)\b\s*(?:,\s*(?P<rest>.*))?$")
_BDF_IN = re.compile(r"(?:PCI:)?(?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}(?:\.[0-7])?)")
_GI_IN = re.compile(r"GPU-I:\s*(\d+)")
_CI_IN = re.compile(r"GPU-CI:\s*(\d+)")
_GI = re.compile(r"(?:^|,\s*)GPU-I:\s*(\d+)")
_CI = re.compile(r"(?:^|,\s*)GPU-CI:\s*(\d+)")
_PID = re.compile(r"(?:^|,\s*)pid=('?<unknown>'?|\d+)")
_NAME = re.compile(r"(?:^|,\s*)name=([^,]*)")
_UUID_AT = re.compile(r"NVRM: GPU at (?:PCI:)?(?P<pci>[0-9a-fA-F:.]+?):? (?P<uuid>GPU-[0-9a-fA-F-]+)")
# R570+: "NVRM: The NVIDIA GPU 0000:b3:00.0" … "NVRM: fallen off the bus and is not responding to
# commands." as one multi-line record (dmesg indents the continuation lines) and no XID at all.
_FALLEN_GPU = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}(?:\.[0-7])?)")
_FALLEN = re.compile(r"fallen off the bus")
FALLEN_WITHIN_LINES = 4
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


def _first_int(*matches: re.Match[str] | None) -> int | None:
    for m in matches:
        if m:
            return int(m.group(1))
    return None


def parse(text: str) -> KmsgScan:
    """Scan a whole kernel-log text; never raises on garbage (unknown lines are skipped)."""
    scan = KmsgScan()
    # /dev/kmsg escapes a multi-line record's newlines as \x0a
    lines = text.replace("\\x0a", "\n").splitlines()
    fallen_at: tuple[int, str] | None = None  # (line, PCI) of "The NVIDIA GPU …" awaiting its verdict
    for no, raw_line in enumerate(lines, start=1):
        line = _message(raw_line.rstrip("\r"))
        m = _XID.search(line)
        if m:
            rest = (m.group("rest") or "").strip()
            inside = m.group("inside")
            bdf = _BDF_IN.search(inside)
            pidm = _PID.search(rest)
            namem = _NAME.search(rest)
            pid = pidm.group(1) if pidm else None
            scan.xids.append(
                XidEvent(
                    line_no=no,
                    pci=pci.normalize(bdf.group("pci") if bdf else inside),
                    xid=int(m.group("xid")),
                    gpu_instance=_first_int(_GI_IN.search(inside), _GI.search(rest)),
                    compute_instance=_first_int(_CI_IN.search(inside), _CI.search(rest)),
                    pid=int(pid) if pid and pid.isdigit() else None,
                    process=namem.group(1).strip() if namem else None,
                    text=rest,
                    raw=line.strip(),
                )
            )
            continue
        f = _FALLEN_GPU.search(line)
        if f:
            fallen_at = (no, pci.normalize(f.group("pci")))
        if fallen_at and _FALLEN.search(line) and no - fallen_at[0] <= FALLEN_WITHIN_LINES:
            start = fallen_at[0]
            scan.xids.append(XidEvent(
                line_no=no, pci=fallen_at[1], xid=79, gpu_instance=None, compute_instance=None, pid=None,
                process=None, text="GPU has fallen off the bus (reported by the driver without an XID)",
                raw=" ".join(_message(x).strip() for x in lines[start - 1:no])))
            fallen_at = None
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
