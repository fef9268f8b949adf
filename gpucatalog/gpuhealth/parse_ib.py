"""Pure parsers for InfiniBand port sysfs files (``/sys/class/infiniband/<dev>/ports/<n>/…``).

``state`` is ``"%d: %s"`` (``4: ACTIVE``, ``5: ACTIVE_DEFER``), ``phys_state`` likewise
(``5: LinkUp``, ``7: Phy Test``), ``rate`` is ``"%d%s Gb/sec (%dX%s)"`` (``400 Gb/sec (4X NDR)``,
``400 Gb/sec (8X HDR)``, ``2.5 Gb/sec (1X SDR)``); kernels before 3.x named no speed for SDR
(``10 Gb/sec (4X)``). Called by the InfiniBand probe; raises :class:`ProbeError` on text that is
not in these shapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpucatalog.gpuhealth.errors import ProbeError

PROBE = "infiniband"
_STATE = re.compile(r"^\s*(\d+):\s*([A-Za-z_]+)\s*$")
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec(?:\s*\((\d+)X\s*([A-Za-z0-9]+)?\))?\s*$")


@dataclass(frozen=True)
class PortState:
    code: int
    name: str


@dataclass(frozen=True)
class PortRate:
    gbps: float
    width: int | None
    speed: str | None


def parse_state(text: str) -> PortState:
    m = _STATE.match(text)
    if not m:
        raise ProbeError(PROBE, f"unexpected port state {text.strip()[:60]!r} (expected e.g. '4: ACTIVE')")
    return PortState(int(m.group(1)), m.group(2).upper())


def parse_rate(text: str) -> PortRate:
    m = _RATE.match(text)
    if not m:
        raise ProbeError(PROBE, f"unexpected port rate {text.strip()[:60]!r} (expected e.g. '400 Gb/sec (4X NDR)')")
    return PortRate(float(m.group(1)), int(m.group(2)) if m.group(2) else None, m.group(3))
