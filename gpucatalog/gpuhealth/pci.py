"""PCI bus id normalisation shared by every parser.

The kernel log writes ``0000:3b:00`` (sometimes ``0000:3b:00.0``), ``nvidia-smi -q -x`` writes
``00000000:3B:00.0``; both must name the same GPU. Called by the parsers and the checks.
"""

from __future__ import annotations

import re

_BDF = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.([0-7]))?$")


def normalize(bus_id: str) -> str:
    """Return ``dddd:bb:dd`` in lower case; the function number is dropped (GPUs are function 0).

    Unparsable input is returned lower-cased and stripped, so it still compares equal to itself.
    """
    text = bus_id.strip()
    m = _BDF.match(text)
    if not m:
        return text.lower()
    domain = (m.group(1) or "0").lower()[-4:].rjust(4, "0")
    return f"{domain}:{m.group(2).lower().rjust(2, '0')}:{m.group(3).lower().rjust(2, '0')}"
