"""Charts stay inside the repository (issue 14, attack 6): a chart folder that is a symlink out
of the repository, a symlinked file read with ``.Files.Get``, a symlinked template folder and a
``..`` chart path are refused (exit 2) before helm reads anything; links inside the repository
still work and count in the digest."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpucatalog.catalog import loader, render
from gpucatalog.cli import main

pytestmark = pytest.mark.toolchain  # renders with the pinned helm

LEAK = 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: leak}\ndata:\n  x: {{ .Files.Get "files/data" | quote }}\n'


def _render(mini_catalog: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    out = mini_catalog.parent / "out"
    rc = main(["--catalog-dir", str(mini_catalog), "render", "mini", "--profile", "sim", "--out", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if rc != 0:
        assert not out.exists()
    return rc, err


def test_chart_folder_symlinked_out_of_the_repo(mini_catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = mini_catalog.parent / "charts" / "demo"
    outside = tmp_path.parent / f"{tmp_path.name}-outside-chart"
    shutil.copytree(chart, outside)
    shutil.rmtree(chart)
    chart.symlink_to(outside)
    rc, err = _render(mini_catalog, capsys)
    assert rc == 2 and f"resolves to {outside}, outside the repository" in err


def test_files_get_of_a_symlink_to_a_host_file(mini_catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path.parent / f"{tmp_path.name}-host-secret"
    secret.write_text("HOST-SECRET-42")
    chart = mini_catalog.parent / "charts" / "demo"
    (chart / "files").mkdir()
    (chart / "files" / "data").symlink_to(secret)
    (chart / "templates" / "leak.yaml").write_text(LEAK)
    rc, err = _render(mini_catalog, capsys)
    assert rc == 2 and "files/data resolves to" in err and "HOST-SECRET-42" not in err


def test_symlinked_templates_folder_out_of_the_repo(mini_catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = mini_catalog.parent / "charts" / "demo"
    outside = tmp_path.parent / f"{tmp_path.name}-tpl"
    shutil.move(chart / "templates", outside)
    (chart / "templates").symlink_to(outside)
    rc, err = _render(mini_catalog, capsys)
    assert rc == 2 and "outside the repository" in err


def test_dot_dot_chart_path(mini_catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-dotdot" / "demo"
    shutil.copytree(mini_catalog.parent / "charts" / "demo", outside)
    f = mini_catalog / "components" / "alpha" / "1.0.0.yaml"
    rel = Path("..") / outside.parent.name / "demo"
    f.write_text(f.read_text().replace("path: charts/demo", f"path: {rel}"))
    rc, err = _render(mini_catalog, capsys)
    assert rc == 2 and "spec.chart.path" in err and "does not match '^charts/" in err  # the schema's pattern


def test_symlink_loop_is_a_message(mini_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chart = mini_catalog.parent / "charts" / "demo"
    (chart / "loop").symlink_to(chart)
    rc, err = _render(mini_catalog, capsys)
    assert rc == 2 and "symlink loop" in err


def test_symlink_inside_the_repo_is_followed_and_digested(mini_catalog: Path) -> None:
    repo = mini_catalog.parent
    (repo / "shared").mkdir()
    (repo / "shared" / "data").write_text("one")
    chart = repo / "charts" / "demo"
    (chart / "files").mkdir()
    (chart / "files" / "data").symlink_to(repo / "shared" / "data")
    (chart / "templates" / "leak.yaml").write_text(LEAK)
    cat = loader.load_catalog(mini_catalog)
    first = render.render_bundle(cat, "mini", "sim")
    assert any(o.get("data", {}).get("x") == "one" for c in first.components for o in c.objects)
    (repo / "shared" / "data").write_text("two")
    assert render.render_bundle(cat, "mini", "sim").digest != first.digest
