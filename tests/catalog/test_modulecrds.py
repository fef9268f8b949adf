"""CRDs taken from a pinned Go module: digest pinning, assembly into a cached chart copy, and the
refusals (wrong digest, empty folder, a chart that already carries the folder). The module
folder is a temp folder here; ``test_kueue_module.py`` checks the real pinned module."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.catalog import modulecrds
from gpucatalog.catalog.model import ModuleCRDs
from gpucatalog.core import errors
from gpucatalog.toolchain import build

CRD = b"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: as.example.com}\n"


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "mod"
    (root / "config/crds").mkdir(parents=True)
    (root / "config/crds/a.yaml").write_bytes(CRD)
    (root / "config/crds/notes.txt").write_text("not a CRD")
    monkeypatch.setattr(build, "module_dir", lambda module, version: root)
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path / "cache"))
    return root


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    d = tmp_path / "charts" / "thing"
    (d / "templates").mkdir(parents=True)
    (d / "Chart.yaml").write_text("apiVersion: v2\nname: thing\nversion: 0.1.0\n")
    return d


def _pin(digest: str) -> ModuleCRDs:
    return ModuleCRDs(module="example.com/thing", version="v1.0.0", path="config/crds", into="module-crds", digest=digest)


def test_digest_covers_names_and_bytes() -> None:
    base = modulecrds.files_digest({"a.yaml": CRD})
    assert base == modulecrds.files_digest({"a.yaml": CRD})
    assert base != modulecrds.files_digest({"b.yaml": CRD})
    assert base != modulecrds.files_digest({"a.yaml": CRD + b"\n"})
    assert base != modulecrds.files_digest({"a.yaml": CRD, "b.yaml": CRD})


def test_assembled_chart_has_the_pinned_files_and_is_reused(module: Path, chart: Path) -> None:
    pin = _pin(modulecrds.files_digest({"a.yaml": CRD}))
    out = modulecrds.assemble(chart, "sha256:chart", pin)
    assert out.name == "thing" and (out / "Chart.yaml").is_file()
    assert sorted(p.name for p in (out / "module-crds").iterdir()) == ["a.yaml"]  # only *.yaml
    assert (out / "module-crds/a.yaml").read_bytes() == CRD
    assert not (chart / "module-crds").exists()  # the chart in the repo stays without copies
    (module / "config/crds/a.yaml").write_bytes(b"changed")  # cached by content: not read again
    assert modulecrds.assemble(chart, "sha256:chart", pin) == out
    # another chart digest is another assembly (and now sees the changed module)
    with pytest.raises(errors.InputError):
        modulecrds.assemble(chart, "sha256:chart-v2", pin)


def test_a_different_module_content_is_refused_naming_the_digest(module: Path, chart: Path) -> None:
    with pytest.raises(errors.InputError) as info:
        modulecrds.assemble(chart, "sha256:chart", _pin("sha256:" + "0" * 64), source_file=Path("kueue/v1.yaml"))
    msg = str(info.value)
    assert msg.startswith("kueue/v1.yaml: spec.crds.digest: CRDs of example.com/thing@v1.0.0/config/crds have digest")
    assert "(1 files: a.yaml)" in msg and info.value.exit_code == 2


def test_an_empty_folder_is_refused(module: Path, chart: Path) -> None:
    (module / "config/crds/a.yaml").unlink()
    with pytest.raises(errors.NotFoundError, match="spec.crds.path: example.com/thing@v1.0.0 has no"):
        modulecrds.assemble(chart, "sha256:chart", _pin("sha256:" + "0" * 64))


def test_a_chart_that_already_has_the_folder_is_refused(module: Path, chart: Path) -> None:
    (chart / "module-crds").mkdir()
    with pytest.raises(errors.ConflictError, match="must not mix with copies"):
        modulecrds.assemble(chart, "sha256:chart", _pin(modulecrds.files_digest({"a.yaml": CRD})))
