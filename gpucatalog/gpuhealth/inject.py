"""Synthetic XID records for conformance tests: ``gpu-health inject-xid`` writes one NVRM Xid line
into a node's kernel log where the agent reads it, and ``--clear`` takes such lines back out
where that is possible.

The line has the driver's text form (see :mod:`.parse_kmsg`) and says it is synthetic: its
process is ``name=gpu-catalog-inject`` (:data:`MARKER`) and its text says it is a test fault.

* a character device (a real ``/dev/kmsg``): the record ``<4>`` + message goes in one write,
  which the kernel stores as one record of facility "user" (so ``dmesg -x`` also shows it did not
  come from the driver). A real kernel log cannot be edited: ``--clear`` succeeds only when no
  synthetic XID is active any more (the node was rebooted, or its GPU reset was logged), and
  otherwise says that only the node's repair clears it;
* a regular file (a sim node folder's ``dev/kmsg``): one ``<prio>,<seq>,<usec>,-;<message>``
  record is appended, and ``--clear`` removes the synthetic records in place (never replacing
  the file: pods bind-mount it, and a new inode would be invisible to them).

Called by :mod:`.main` (the ``inject-xid`` subcommand), run by catalog certify's pod injector
(``--inject-faults``) in a short-lived pod on the node.
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from gpucatalog.gpuhealth import parse_kmsg, parse_nvsmi, probes
from gpucatalog.gpuhealth.errors import ConfigError, GpuHealthError

MARKER = "gpu-catalog-inject"
LEVEL = 4  # KERN_WARNING, as the driver logs XIDs
_SEQ = re.compile(r"^\d+,(\d+),")


class NotClearable(GpuHealthError):
    """A synthetic XID is still active in a kernel log that cannot be edited (exit 2)."""


def message(pci_bus_id: str, code: int, token: str | None = None) -> str:
    """The kernel message of a synthetic XID for the GPU at ``pci_bus_id`` (``0000:3b:00``).

    ``token`` (default: random) makes each injection its own line, as a real fault's pid does:
    the agent reports one Event per distinct line, so a repeated injection is seen again."""
    token = token or os.urandom(4).hex()
    return (f"NVRM: Xid (PCI:{pci_bus_id}): {code}, pid='<unknown>', name={MARKER}, "
            f"synthetic XID {code} written by gpu-health inject-xid (a test fault, not a hardware error; "
            f"injection {token})")


def already_written(path: Path, token: str) -> str | None:
    """The record of injection ``token`` when the kernel log at ``path`` holds it already: a pod
    retried after its first try was removed before it reported may have written it (idempotence)."""
    lines = probes.read_kmsg(path).splitlines()
    return next((ln for ln in lines if f"name={MARKER}," in ln and ln.rstrip().endswith(f"injection {token})")), None)


def gpu_bus_id(smi: parse_nvsmi.SmiReading, index: int) -> str:
    """The PCI bus id of GPU ``index`` as nvidia-smi lists it (ConfigError naming the indices)."""
    for g in smi.gpus:
        if g.index == index:
            return g.pci_bus_id
    listed = ", ".join(str(g.index) for g in smi.gpus) or "none"
    raise ConfigError(f"--gpu {index}: nvidia-smi lists no such GPU on this node (GPUs: {listed})")


def _is_chardev(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError as exc:
        raise ConfigError(f"kernel log {path}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class Written:
    path: Path
    record: str
    device: bool


def write(path: Path, msg: str) -> Written:
    """Write ``msg`` as one kernel-log record at ``path`` (device or regular file)."""
    if _is_chardev(path):
        record = f"<{LEVEL}>{msg}\n"
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, record.encode())  # one write = one record
        finally:
            os.close(fd)
        return Written(path, record.rstrip("\n"), True)
    seq = _last_seq(path) + 1
    record = f"{LEVEL},{seq},{int(time.monotonic() * 1_000_000)},-;{msg}"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (record + "\n").encode())
    finally:
        os.close(fd)
    return Written(path, record, False)


def _last_seq(path: Path) -> int:
    seq = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _SEQ.match(line)
        if m:
            seq = max(seq, int(m.group(1)))
    return seq


def clear(path: Path, uuid_by_pci: dict[str, str] | None = None) -> str:
    """Take the synthetic XID records back out; returns what was done.

    A regular file is rewritten in place without them. A device cannot be edited: NotClearable
    when a synthetic XID is still active there (the node's reboot or a logged GPU reset is what
    clears it), a note when none is."""
    if _is_chardev(path):
        scan = parse_kmsg.parse(probes.read_kmsg(path))
        active = [x for x in parse_kmsg.active_xids(scan, uuid_by_pci) if x.process == MARKER]
        if active:
            raise NotClearable(
                f"{path} is a real kernel log, which cannot be edited: {len(active)} synthetic XID record(s) "
                f"({', '.join(f'XID {x.xid} on {x.pci}' for x in active)}) stay until the node's repair "
                "(a reboot, or a logged GPU reset) clears them")
        return f"{path}: no synthetic XID is active (the node was repaired since)"
    with path.open("r+", encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines(keepends=True)
        keep = [ln for ln in lines if f"name={MARKER}," not in ln]
        if len(keep) != len(lines):
            fh.seek(0)
            fh.write("".join(keep))
            fh.truncate()
    return f"{path}: removed {len(lines) - len(keep)} synthetic XID record(s)"
