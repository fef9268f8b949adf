"""Every conformance case by suite, as evidence names it (``suite/case``), read from the suites'
own ``CASE_NAMES`` and the steps certification adds around them.

Called by the AI-conformance mapping's validation (``pipelines.ai_conformance``): a mapping that
names a case no suite runs is caught before any report claims it.
"""

from __future__ import annotations

import importlib

from gpucatalog.validators.conformance import SUITES

# Cases certification itself records around the suites (pipelines.certify): the static checks.
PIPELINE_CASES: dict[str, tuple[str, ...]] = {"static": ("schemas-policy-lint",)}
# Suites run behind a preflight case (base.run_with_preflight), which evidence records first.
_PREFLIGHT = ("fractional_gpu", "gpu_sharing_dra")


def cases() -> dict[str, tuple[str, ...]]:
    """suite -> its case names."""
    out = dict(PIPELINE_CASES)
    for suite, module in SUITES.items():
        names: tuple[str, ...] = tuple(importlib.import_module(module).CASE_NAMES)
        out[suite] = (("preflight",) if suite in _PREFLIGHT else ()) + names
    return out


def known(ref: str) -> bool:
    """``suite/case`` names a case some suite runs."""
    suite, _, case = ref.partition("/")
    return case in cases().get(suite, ())
