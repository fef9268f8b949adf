"""CRDs a local chart takes from a pinned Go module, never from copies kept in this repository.

Some upstream projects (Kueue) publish their CRDs only inside their Go module. A component
version says where (``spec.crds``: module, version, folder, digest); at render time this module
reads the ``*.yaml`` files of that folder from the Go module cache (``go mod download``, the same
source the toolchain builds the binary from), checks their digest against the pinned one, and
assembles a copy of the chart with the files placed under ``spec.crds.into``. Helm renders and
installs that assembled chart; its tree digest (chart + CRDs) is what the bundle lock records.

Called by ``catalog.charts.resolve``. Assembled charts are cached by content under
``$GPU_CATALOG_CACHE/assembled-charts/`` and written atomically (a half-written copy is never used).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from gpucatalog.catalog import model
from gpucatalog.core import errors
from gpucatalog.toolchain import build


def files_digest(files: dict[str, bytes]) -> str:
    """Digest of named files: each name and the sha256 of its bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0")
        h.update(hashlib.sha256(files[name]).hexdigest().encode() + b"\n")
    return "sha256:" + h.hexdigest()


def read_folder(folder: Path) -> dict[str, bytes]:
    """The ``*.yaml`` files directly in ``folder`` (what a CRD ``bases`` folder holds)."""
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.yaml")) if p.is_file()}


def module_files(crds: model.ModuleCRDs, source_file: Path | None = None) -> dict[str, bytes]:
    """The pinned module's CRD files, refused unless they match ``crds.digest``."""
    where = str(source_file) if source_file else None
    folder = build.module_dir(crds.module, crds.version) / crds.path
    files = read_folder(folder) if folder.is_dir() else {}
    if not files:
        raise errors.NotFoundError(
            f"{crds.module}@{crds.version} has no *.yaml files under {crds.path}",
            path=where, field="spec.crds.path", expected="the module folder holding the CRDs",
        )
    actual = files_digest(files)
    if actual != crds.digest:
        raise errors.InputError(
            f"CRDs of {crds.module}@{crds.version}/{crds.path} have digest {actual}, pinned {crds.digest} "
            f"({len(files)} files: {', '.join(sorted(files))})",
            path=where, field="spec.crds.digest", expected=actual,
        )
    return files


def assemble(chart_dir: Path, chart_digest: str, crds: model.ModuleCRDs, source_file: Path | None = None) -> Path:
    """A copy of ``chart_dir`` with the module's CRDs under ``crds.into``, cached by content."""
    key = hashlib.sha256(f"{chart_digest}\n{crds.digest}\n{crds.into}".encode()).hexdigest()[:24]
    root = build.cache_root() / "assembled-charts" / key
    # helm lint wants the folder named after the chart.
    out = root / chart_dir.name
    if out.is_dir():
        return out
    files = module_files(crds, source_file)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=root.parent))
    try:
        shutil.copytree(chart_dir, tmp / chart_dir.name, ignore=shutil.ignore_patterns("__pycache__"))
        dest = tmp / chart_dir.name / crds.into
        if dest.exists():
            raise errors.ConflictError(
                f"chart {chart_dir.name} already has {crds.into}; module CRDs must not mix with copies",
                path=str(source_file) if source_file else None, field="spec.crds.into",
            )
        dest.mkdir(parents=True)
        for name, data in files.items():
            (dest / name).write_bytes(data)
        try:
            tmp.rename(root)
        except OSError:
            if not out.is_dir():  # not another process that assembled the same content first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
