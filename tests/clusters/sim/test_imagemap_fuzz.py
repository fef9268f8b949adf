"""The image-map overlay loader takes any file a user may hand it: every input ends as a valid
load or a clean bad-input error (exit 2, ``errors.InputError`` family), never another exception
(a traceback). Seeded from a real-looking overlay (KAI's images) mutated field by field, and from
its text mutated byte by byte; the seed is fixed so a failure reproduces."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpucatalog.clusters.sim import imagemap
from gpucatalog.core import errors

KAI = "ghcr.io/kai-scheduler/kai-scheduler"
EXE = tempfile.mkdtemp(prefix="imagemap-fuzz-")
_exe = Path(EXE) / "scheduler"
_exe.write_text("#!/bin/sh\necho v0.16.8\n")
_exe.chmod(0o755)
(Path(EXE) / "not-executable").write_text("x")


def _real() -> dict[str, Any]:
    return {"apiVersion": "gpu-catalog.dev/v1alpha1", "kind": "SimImageMapOverlay", "images": [
        {"image": f"{KAI}/scheduler", "executable": str(_exe), "entrypoint": "/workspace/app"},
        {"image": f"{KAI}/binder:v0.16.8", "executable": "scheduler", "entrypoint": "/workspace/app",
         "versionArgs": ["--version"]},
    ]}


ODD = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30)
    | st.sampled_from(["", "/", "..", "scheduler", "not-executable", "/nonexistent", f"{KAI}/scheduler",
                       f"{KAI}/scheduler@sha256:" + "0" * 64, "UPPER/case", "a" * 300, "/workspace/app", "sch\x00eduler", "x/" * 3000, "~nobody/x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=6,
)
FIELD = st.sampled_from(["image", "executable", "entrypoint", "versionArgs", "extra"])
TOP = st.sampled_from(["apiVersion", "kind", "images", "extra"])


@st.composite
def mutated(draw: st.DrawFn) -> str:
    doc = _real()
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        if draw(st.booleans()):
            entry = doc["images"][draw(st.integers(min_value=0, max_value=1))] if isinstance(doc.get("images"), list) \
                and len(doc["images"]) > 1 and isinstance(doc["images"][0], dict) and isinstance(doc["images"][1], dict) \
                else None
            if entry is not None:
                key = draw(FIELD)
                if draw(st.booleans()):
                    entry[key] = draw(ODD)
                else:
                    entry.pop(key, None)
        else:
            doc[draw(TOP)] = draw(ODD)
    if draw(st.booleans()) and isinstance(doc.get("images"), list) and doc["images"]:
        doc["images"].append(doc["images"][0])  # an image mapped twice
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    if draw(st.booleans()):  # byte-level damage: truncation, a stray character, a tab
        at = draw(st.integers(min_value=0, max_value=len(text)))
        text = text[:at] + draw(st.sampled_from(["", "\t", ":", "{", "\x00", "- ", "\n  - ", "&a *a", "!!python/object:x"]))
        text += text[at:] if draw(st.booleans()) else ""
    return text


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated())
# found by this test: a name too long for the file system was an OSError traceback
@example(text=yaml.safe_dump({**_real(), "images": [{"image": "ghcr.io/a/b", "executable": "x/" * 3000,
                                                     "entrypoint": "/a"}]}))
def test_any_overlay_loads_or_is_clean_bad_input(text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "images.yaml"
        f.write_text(text)
        (Path(d) / "scheduler").symlink_to(_exe)  # the relative executable of the real overlay
        try:
            binaries = imagemap.load(f)
        except errors.InputError as exc:
            assert exc.exit_code == 2 and str(exc)
            return
        assert all(Path(b.executable).is_absolute() and b.sha256.startswith("sha256:") for b in binaries)
        assert len({b.image for b in binaries}) == len(binaries)


def test_the_seed_itself_loads() -> None:
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "images.yaml"
        f.write_text(yaml.safe_dump(_real()))
        (Path(d) / "scheduler").symlink_to(_exe)
        assert [b.image for b in imagemap.load(f)] == [f"{KAI}/scheduler", f"{KAI}/binder:v0.16.8"]
