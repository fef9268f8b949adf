"""``render --out`` never deletes a folder it did not write, and never writes over the
filesystem root, the repository, the catalog or a git work tree (issue 14, attack 7)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpucatalog.catalog import loader, render
from gpucatalog.cli import main
from gpucatalog.core import errors

pytestmark = pytest.mark.toolchain  # renders with the pinned helm


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_foreign_folder_is_refused_even_with_force(mini_catalog: Path, tmp_path: Path) -> None:
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    (out / render.LOCK_FILE).write_text("{}")  # a lock file alone does not make it ours
    before = _tree(out)
    cat = loader.load_catalog(mini_catalog)
    for force in (False, True):
        with pytest.raises(errors.ConflictError, match="was not written by `catalog render`") as exc:
            render.render_bundle(cat, "mini", "sim", out, force=force)
        assert exc.value.exit_code == 2
        assert _tree(out) == before


def test_previous_render_is_replaced_and_edits_need_force(mini_catalog: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    cat = loader.load_catalog(mini_catalog)
    render.render_bundle(cat, "mini", "sim", out)
    marker = json.loads((out / render.MARKER).read_text())
    assert set(marker["files"]) == {"alpha/manifests.yaml", "beta/manifests.yaml", render.LOCK_FILE}
    render.render_bundle(cat, "mini", "kind", out)  # an untouched previous render is replaced
    assert json.loads((out / render.LOCK_FILE).read_text())["profile"] == "kind"
    (out / "alpha" / "manifests.yaml").write_text("edited by hand\n")
    (out / "mine.txt").write_text("added by hand\n")
    before = _tree(out)
    with pytest.raises(errors.ConflictError, match=r"changed since it was written \(alpha/manifests.yaml, mine.txt\)"):
        render.render_bundle(cat, "mini", "sim", out)
    assert _tree(out) == before
    render.render_bundle(cat, "mini", "sim", out, force=True)
    assert not (out / "mine.txt").exists() and json.loads((out / render.LOCK_FILE).read_text())["profile"] == "sim"


def test_empty_folder_is_used(mini_catalog: Path, tmp_path: Path) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    render.render_bundle(loader.load_catalog(mini_catalog), "mini", "sim", out)
    assert (out / render.LOCK_FILE).is_file() and (out / render.MARKER).is_file()


@pytest.mark.parametrize("where", ["root", "repo", "catalog", "inside-catalog", "git", "symlink-to-repo"])
def test_dangerous_targets_are_refused_whatever_the_flags(
    mini_catalog: Path, tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = mini_catalog.parent
    (repo / ".git").mkdir()
    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    (tmp_path / "link").symlink_to(repo)
    target = {"root": Path("/"), "repo": repo, "catalog": mini_catalog, "inside-catalog": mini_catalog / "bundles",
              "git": work, "symlink-to-repo": tmp_path / "link"}[where]
    # even a forged marker does not make these folders ours
    forged = json.dumps({"files": {}})
    if where != "root":
        real = target.resolve()
        (real / render.MARKER).write_text(forged)
    before = _tree(repo)
    argv = ["--catalog-dir", str(mini_catalog), "render", "mini", "--profile", "sim", "--out", str(target), "--force"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "refusing to render into" in err and "Traceback" not in err
    assert _tree(repo) == before


def test_out_dot_inside_a_clone_keeps_the_clone(mini_catalog: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    repo = mini_catalog.parent
    (repo / ".git").mkdir()
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    monkeypatch.chdir(repo)
    assert main(["--catalog-dir", str(mini_catalog), "render", "mini", "--profile", "sim", "--out", ".", "--force"]) == 2
    assert "it is the repository root" in capsys.readouterr().err
    assert (repo / ".git" / "HEAD").is_file() and os.path.isdir(repo / "charts")
