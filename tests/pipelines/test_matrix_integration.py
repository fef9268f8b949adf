"""One live matrix cell: gpu-queueing on the default Kubernetes release, certified on a real sim
cluster, read back from its signed evidence; a second matrix run reuses it without a cluster.
The test owns its cluster: a matrix cell starts one at its Kubernetes release."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.catalog import loader
from gpucatalog.pipelines import keys, matrix, matrix_files
from gpucatalog.toolchain import releases


@pytest.mark.integration
@pytest.mark.timeout(1800)
def test_one_live_cell_then_cached(tmp_path: Path) -> None:
    cat = loader.load_catalog()
    key = keys.generate(tmp_path / "keys", "matrix")
    opts = matrix.Options(bundles=["gpu-queueing@0.3.0"], kubernetes=[releases.default()], out_dir=tmp_path / "m",
                          signing_key=key.private_path)
    (cell,) = matrix.run(cat, opts, print)
    assert cell.status == "passed", cell.detail
    assert cell.evidence == f"cells/gpu-queueing/0.3.0/{releases.minor(releases.default())}" and not cell.cached
    (again,) = matrix.run(cat, matrix.Options(bundles=["gpu-queueing@0.3.0"], kubernetes=[releases.default()],
                                              out_dir=tmp_path / "m", signing_key=key.private_path), print)
    assert again.cached and again.status == "passed" and again.digest == cell.digest
    assert "✅ passed" in (tmp_path / "m" / matrix_files.MARKDOWN).read_text()
