"""The README's compatibility matrix is generated, and only from evidence that verifies.

``docs/matrix/`` is the output folder of a ``catalog matrix`` run (its cells' signed evidence,
``matrix.md``/``.json``/``.html``) and ``signer.pub`` the key it was signed with. Read back the way
``catalog matrix --no-run`` reads it, against what the catalog renders today, it must give the same
``matrix.md``, and the README must show that table. A chart or value changed since the run changes
a digest: its cells then read as not run, and this test fails until the matrix is run again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpucatalog.catalog import loader, render
from gpucatalog.pipelines import keys, matrix, matrix_files

REPO = Path(__file__).resolve().parents[2]
MATRIX = REPO / "docs" / "matrix"
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"

pytestmark = pytest.mark.toolchain  # renders the bundles with helm


def _never(_arg: object) -> None:
    raise AssertionError("reading the matrix back must run nothing")


def _readme_block() -> str:
    text = (REPO / "README.md").read_text()
    assert BEGIN in text and END in text, f"README.md has no {BEGIN} … {END} block"
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def _as_readme(markdown: str) -> str:
    """matrix.md without its title, its links made relative to the repository root."""
    body = markdown.split("\n", 1)[1].lstrip("\n")
    return body.replace("](cells/", "](docs/matrix/cells/")


def test_readme_matrix_is_the_signed_evidence_read_back(tmp_path: Path) -> None:
    doc = json.loads((MATRIX / "matrix.json").read_text())
    pub = keys.load_public(MATRIX / "signer.pub")
    out = tmp_path / "matrix"
    shutil.copytree(MATRIX / "cells", out / "cells")
    cat = loader.load_catalog()
    targets = [matrix.Target.of(render.render_bundle(cat, ref, "sim")) for ref in doc["bundles"]]
    opts = matrix.Options(bundles=doc["bundles"], kubernetes=doc["kubernetes"], out_dir=out, run=False,
                          trusted={keys.keyid(pub): pub})
    cells = matrix.run_targets(targets, opts, lambda _m: None, certify_cell=_never, ensure=_never)
    short = [(c.bundle, c.minor, c.status, c.detail) for c in cells if c.status in ("not-run", "unverified")]
    assert not short, "stale or unverifiable cells: run `catalog matrix … --out docs/matrix` again"
    assert (out / matrix_files.MARKDOWN).read_text() == (MATRIX / matrix_files.MARKDOWN).read_text()
    assert _readme_block() == _as_readme((MATRIX / matrix_files.MARKDOWN).read_text())


def test_a_cell_signed_by_another_key_is_never_green(tmp_path: Path) -> None:
    """The check above can fail: the same evidence read with a key that did not sign it."""
    doc = json.loads((MATRIX / "matrix.json").read_text())
    other = keys.load_public(keys.generate(tmp_path / "keys", "other").public_path)
    out = tmp_path / "matrix"
    shutil.copytree(MATRIX / "cells", out / "cells")
    ref = next(c["bundle"] for c in doc["cells"] if c["status"] == "passed")
    target = matrix.Target.of(render.render_bundle(loader.load_catalog(), ref, "sim"))
    opts = matrix.Options(bundles=[ref], kubernetes=doc["kubernetes"], out_dir=out, run=False,
                          trusted={keys.keyid(other): other})
    cells = matrix.run_targets([target], opts, lambda _m: None, certify_cell=_never, ensure=_never)
    assert "passed" not in {c.status for c in cells}
    cell = next(c for c in doc["cells"] if c["bundle"] == ref and c["status"] == "passed")
    read = matrix.read_cell(out / cell["evidence"], out, target, cell["kubernetes"], opts.trusted)
    assert read is not None and read.status == "unverified"
