"""Version parsing, ordering and Kubernetes range checks (``>=1.30.0 <1.37.0``)."""

from __future__ import annotations

import re

from gpucatalog.core import errors

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")
_CONSTRAINT = re.compile(r"^(>=|<=|>|<|=|==)?\s*(v?\d+\.\d+(?:\.\d+)?(?:-[0-9A-Za-z.-]+)?)$")


def parse(v: str) -> tuple[int, int, int, tuple[str, ...]]:
    m = _VERSION.match(v.strip())
    if not m:
        raise errors.InputError(f"not a semantic version: {v!r}", expected="MAJOR.MINOR.PATCH")
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), pre


def key(v: str) -> tuple[int, int, int, int, tuple[str, ...]]:
    a, b, c, pre = parse(v)
    # A release sorts after its pre-releases.
    return a, b, c, 0 if pre else 1, pre


def sort_versions(vs: list[str]) -> list[str]:
    return sorted(vs, key=key)


def satisfies(version: str, constraint: str) -> bool:
    """``constraint`` is space-separated comparisons, all of which must hold."""
    v = key(version)[:3]
    for part in constraint.split():
        m = _CONSTRAINT.match(part)
        if not m:
            raise errors.InputError(f"bad version constraint {part!r}", expected="e.g. >=1.30.0 <1.37.0")
        op = m.group(1) or "="
        bound = m.group(2)
        if bound.count(".") == 1:
            bound += ".0"
        b = key(bound)[:3]
        ok = {
            ">=": v >= b,
            "<=": v <= b,
            ">": v > b,
            "<": v < b,
            "=": v == b,
            "==": v == b,
        }[op]
        if not ok:
            return False
    return True
