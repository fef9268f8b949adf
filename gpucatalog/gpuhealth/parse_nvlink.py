"""Pure parser for ``nvidia-smi nvlink -s`` (per-GPU NVLink link state and speed).

::

    GPU 0: NVIDIA H200 (UUID: GPU-9d1c…)
         Link 0: 26.562 GB/s
         Link 1: <inactive>

A link is up when it reports a non-zero speed; ``<inactive>`` or ``0 GB/s`` is down. A GPU line
followed by "NVLink is not supported"/"all links are inActive" has zero links up. Lines that match
nothing are ignored; output with no GPU header at all raises :class:`ProbeError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpucatalog.gpuhealth.errors import ProbeError

PROBE = "nvidia-smi nvlink"
_GPU = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: (GPU-[0-9a-fA-F-]+)\))?\s*$")
_LINK = re.compile(r"^Link (\d+): (.*)$")
_SPEED = re.compile(r"([0-9.]+)\s*GB/s")


@dataclass
class NvlinkGpu:
    index: int
    uuid: str
    links_up: list[int] = field(default_factory=list)
    links_down: list[int] = field(default_factory=list)


def parse(text: str) -> list[NvlinkGpu]:
    gpus: list[NvlinkGpu] = []
    for raw in text.splitlines():
        line = raw.strip()
        g = _GPU.match(line)
        if g:
            gpus.append(NvlinkGpu(index=int(g.group(1)), uuid=g.group(3) or ""))
            continue
        link = _LINK.match(line)
        if link and gpus:
            speed = _SPEED.search(link.group(2))
            up = speed is not None and float(speed.group(1)) > 0.0
            (gpus[-1].links_up if up else gpus[-1].links_down).append(int(link.group(1)))
    if not gpus:
        raise ProbeError(PROBE, f"no 'GPU N:' line in output; first bytes: {text[:80]!r}")
    return gpus
