"""Locate a component version's chart, offline, and compute its digest.

A local chart (``charts/<name>`` in this repo) is digested over its file tree; one whose CRDs come
from a pinned Go module (``spec.crds``) is first assembled with them (``modulecrds``). A remote chart
(``oci://`` / ``https://``, pinned by version and digest) must already be in the offline chart
cache (``$CATALOG_CHART_CACHE``, default ``~/.cache/gpu-catalog/charts``, filled by
``catalog mirror``) as ``<name>-<version>.tgz``; its sha256 must equal the pinned digest, or the
chart is refused. Called by ``catalog.render``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpucatalog.catalog import model, modulecrds
from gpucatalog.core import errors


@dataclass(frozen=True)
class ResolvedChart:
    ref: str  # what helm is given: a directory or a .tgz
    digest: str  # sha256:<hex>
    source: str  # human description for the lock
    values_schema: dict[str, Any] | None
    chart_version: str
    default_values: dict[str, Any]


def cache_dir() -> Path:
    env = os.environ.get("CATALOG_CHART_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("GPU_CATALOG_CACHE", Path.home() / ".cache" / "gpu-catalog")) / "charts"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def tree_digest(root: Path) -> str:
    """Digest of a folder: relative paths and contents of every file, in sorted order."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode() + b"\0")
            h.update(sha256_file(p).encode() + b"\n")
    return "sha256:" + h.hexdigest()


def resolve(cat: model.Catalog, cv: model.ComponentVersion) -> ResolvedChart:
    src = cv.chart
    if src.path is not None:
        d = cat.repo_root / src.path
        if not (d / "Chart.yaml").is_file():
            raise errors.NotFoundError(
                f"chart folder {src.path!r} has no Chart.yaml", path=str(cv.source_file), field="spec.chart.path"
            )
        schema_file = d / "values.schema.json"
        schema = json.loads(schema_file.read_text()) if schema_file.is_file() else None
        meta = yaml.safe_load((d / "Chart.yaml").read_text()) or {}
        defaults_file = d / "values.yaml"
        defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.is_file() else None
        if cv.crds is not None:
            # The chart plus CRDs from the pinned Go module (checked against their pinned digest).
            d = modulecrds.assemble(d, tree_digest(d), cv.crds, cv.source_file)
        return ResolvedChart(
            ref=str(d),
            digest=tree_digest(d),
            source=src.path,
            values_schema=schema,
            chart_version=str(meta.get("version", "")),
            default_values=defaults or {},
        )
    assert src.url and src.version and src.digest  # guaranteed by the schema
    if cv.crds is not None:
        raise errors.InputError(
            "CRDs from a Go module can only be added to a chart of this repository",
            path=str(cv.source_file), field="spec.crds", expected="spec.chart.path, or no spec.crds",
        )
    name = src.url.rstrip("/").rsplit("/", 1)[-1]
    tgz = cache_dir() / f"{name}-{src.version}.tgz"
    if not tgz.is_file():
        raise errors.NotFoundError(
            f"chart {src.url} {src.version} is not in the offline chart cache ({tgz}); run `catalog mirror` first",
            path=str(cv.source_file),
            field="spec.chart",
        )
    actual = sha256_file(tgz)
    if actual != src.digest:
        raise errors.InputError(
            f"chart digest mismatch for {tgz.name}: pinned {src.digest}, cache has {actual}",
            path=str(cv.source_file),
            field="spec.chart.digest",
        )
    schema_text = _read_in_tgz(tgz, "values.schema.json")
    defaults_text = _read_in_tgz(tgz, "values.yaml")
    return ResolvedChart(
        ref=str(tgz),
        digest=actual,
        source=f"{src.url}:{src.version}",
        values_schema=json.loads(schema_text) if schema_text else None,
        chart_version=src.version,
        default_values=(yaml.safe_load(defaults_text) if defaults_text else None) or {},
    )


def _read_in_tgz(tgz: Path, name: str) -> bytes | None:
    """A top-level file of the chart inside its archive (``<chart>/<name>``)."""
    with tarfile.open(tgz) as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if len(parts) == 2 and parts[1] == name and member.isfile():
                f = tar.extractfile(member)
                if f is not None:
                    return f.read()
    return None
