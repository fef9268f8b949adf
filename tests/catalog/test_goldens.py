"""Golden render digests of every shipped bundle and profile: a change to a chart, a value or a
pinned tool shows up here as a reviewed golden update, never silently.

Update after an intended change: ``UPDATE_GOLDENS=1 python3 -m pytest tests/catalog/test_goldens.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpucatalog.catalog import loader, render

pytestmark = pytest.mark.toolchain  # renders with the pinned helm

REPO = Path(__file__).resolve().parents[2]
GOLDENS = Path(__file__).parent / "goldens"
CAT = loader.load_catalog(REPO / "catalog")
CASES = [(n, v, p) for (n, v), b in sorted(CAT.bundles.items()) for p in sorted(b.profiles)]


@pytest.mark.parametrize(("name", "version", "profile"), CASES)
def test_render_matches_golden(name: str, version: str, profile: str) -> None:
    rb = render.render_bundle(CAT, f"{name}@{version}", profile)
    got = {
        "digest": rb.digest,
        "components": {c["name"]: {"output": c["output"]["digest"], "objects": c["output"]["objects"]} for c in rb.lock["components"]},
    }
    path = GOLDENS / f"{name}@{version}.{profile}.json"
    if os.environ.get("UPDATE_GOLDENS"):
        path.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    assert path.is_file(), f"no golden for {name}@{version} ({profile}); run with UPDATE_GOLDENS=1"
    assert json.loads(path.read_text()) == got, f"render of {name}@{version} ({profile}) changed; review, then UPDATE_GOLDENS=1"
