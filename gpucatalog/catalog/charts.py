"""Locate a component version's chart, offline, and compute its digest.

A local chart (``charts/<name>`` in this repo) is digested over its file tree; one whose CRDs come
from a pinned Go module (``spec.crds``) is first assembled with them (``modulecrds``). A remote chart
(``oci://`` / ``https://``, pinned by version and digest) must already be in the offline chart
cache (``$CATALOG_CHART_CACHE``, default ``~/.cache/gpu-catalog/charts``, filled by
``catalog mirror``) as ``<name>-<version>.tgz``; its sha256 must equal the pinned digest, or the
chart is refused. Called by ``catalog.render``.

A local chart stays inside the repository: its path, and every file and folder in it after
following symlinks, must resolve under the repository root. Helm follows symlinks in a chart
folder (``.Files.Get`` included), so a link to ``/etc`` would put host files into rendered
manifests, and into the digest that certification signs.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucatalog.catalog import model, modulecrds
from gpucatalog.core import errors, yamlfile
from gpucatalog.toolchain import build

# Bounds on a remote chart's archive (Helm's own default: 100 MiB decompressed): it is read here
# before helm sees it, and a pinned digest says only that the bytes are the pinned ones.
MAX_INFLATED = 100 << 20
MAX_MEMBERS = 10_000


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
    """``sha256:<hex>`` of a file (the toolchain's hash, in the form chart digests are pinned in)."""
    return "sha256:" + build.sha256_file(path)


def inside(path: Path, root: Path) -> bool:
    """``path`` is ``root`` or below it (both already resolved)."""
    return path == root or root in path.parents


def chart_files(chart: Path, repo_root: Path, source: str) -> Iterator[tuple[str, Path]]:
    """(path relative to the chart, real path) of every file helm would read, in sorted order,
    following symlinks as helm does; a link (or the chart itself) leading out of ``repo_root`` is
    refused, naming the link and where it points."""
    root = repo_root.resolve()

    def refuse(link: Path, target: Path) -> errors.InputError:
        return errors.InputError(
            f"{link} resolves to {target}, outside the repository {root}; a chart may only use files "
            "of this repository", path=source, field="spec.chart.path")

    def walk(folder: Path, rel: str, seen: frozenset[Path]) -> Iterator[tuple[str, Path]]:
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if entry.name == "__pycache__":
                continue
            real = entry.resolve()
            if not inside(real, root):
                raise refuse(entry, real)
            name = f"{rel}{entry.name}"
            if real.is_dir():
                if real in seen:
                    raise errors.InputError(f"{entry} is a symlink loop", path=source, field="spec.chart.path")
                yield from walk(entry, name + "/", seen | {real})
            elif real.is_file():
                yield name, real

    real_chart = chart.resolve()
    if not inside(real_chart, root):
        raise refuse(chart, real_chart)
    yield from walk(chart, "", frozenset({real_chart}))


def tree_digest(root: Path, repo_root: Path | None = None, source: str = "") -> str:
    """Digest of a chart folder: relative paths and contents of every file, in sorted order."""
    h = hashlib.sha256()
    for rel, real in chart_files(root, repo_root or root, source or str(root)):
        h.update(rel.encode() + b"\0")
        h.update(sha256_file(real).encode() + b"\n")
    return "sha256:" + h.hexdigest()


def _json_file(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(yamlfile.decode(yamlfile.read_bytes(path), path))
    except json.JSONDecodeError as exc:
        raise errors.InputError(f"not JSON: {exc.msg}", path=str(path), line=exc.lineno) from exc
    if not isinstance(data, dict):
        raise errors.InputError("not a JSON object", path=str(path), expected="a JSON Schema")
    return data


def _yaml_map(path: Path) -> dict[str, Any]:
    data = yamlfile.load_data(path) if path.is_file() else None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise errors.InputError("not a YAML mapping", path=str(path))
    return data


def resolve(cat: model.Catalog, cv: model.ComponentVersion) -> ResolvedChart:
    src = cv.chart
    if src.path is not None:
        d = cat.repo_root / src.path
        # Checked before anything in it is read: the walk refuses links out of the repository.
        digest = tree_digest(d, cat.repo_root, str(cv.source_file)) if d.is_dir() else ""
        if not (d / "Chart.yaml").is_file():
            raise errors.NotFoundError(
                f"chart folder {src.path!r} has no Chart.yaml", path=str(cv.source_file), field="spec.chart.path"
            )
        meta = _yaml_map(d / "Chart.yaml")
        if cv.crds is not None:
            # The chart plus CRDs from the pinned Go module (checked against their pinned digest);
            # the digest then covers the assembled chart, CRDs included.
            d = modulecrds.assemble(d, digest, cv.crds, cv.source_file)
            digest = tree_digest(d)
        return ResolvedChart(
            ref=str(d.resolve()),
            digest=digest,
            source=src.path,
            values_schema=_json_file(d / "values.schema.json"),
            chart_version=str(meta.get("version", "")),
            default_values=_yaml_map(d / "values.yaml"),
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
    schema_text = _read_in_tgz(tgz, "values.schema.json", f"{src.url} {src.version}")
    defaults_text = _read_in_tgz(tgz, "values.yaml", f"{src.url} {src.version}")
    where = Path(f"{tgz}!values.yaml")
    try:
        schema = json.loads(schema_text) if schema_text else None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise errors.InputError("values.schema.json in the chart archive is not JSON", path=str(tgz)) from exc
    defaults = yamlfile.parse_data(yamlfile.decode(defaults_text, where), where) if defaults_text else None
    return ResolvedChart(
        ref=str(tgz),
        digest=actual,
        source=f"{src.url}:{src.version}",
        values_schema=schema,
        chart_version=src.version,
        default_values=defaults if isinstance(defaults, dict) else {},
    )


def _read_in_tgz(tgz: Path, name: str, chart: str = "") -> bytes | None:
    """A top-level file of the chart inside its archive (``<chart>/<name>``), read in one streamed
    pass that also holds the archive to MAX_MEMBERS entries and MAX_INFLATED bytes, regular files
    and folders only, every path inside the chart's folder: a pinned archive that inflates to GiB
    is refused naming the chart and the limit before it is inflated."""
    chart = chart or tgz.name
    found: bytes | None = None
    inflated = 0
    top = ""  # the chart's folder: the first entry's first path element

    def refuse(what: str) -> errors.InputError:
        return errors.InputError(f"chart archive {tgz.name} of {chart} {what}", path=str(tgz), field="spec.chart",
                                 expected=f"a Helm chart archive: at most {MAX_MEMBERS} entries and "
                                          f"{MAX_INFLATED >> 20} MiB inflated, files and folders inside its folder")
    try:
        with tarfile.open(tgz, "r|*") as tar:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise refuse(f"has more than {MAX_MEMBERS} entries")
                inflated += max(member.size, 0)
                if inflated > MAX_INFLATED:
                    raise refuse(f"inflates to more than {MAX_INFLATED >> 20} MiB")
                if not (member.isfile() or member.isdir()):
                    raise refuse(f"holds {member.name}, which is neither a file nor a folder (a link?)")
                parts = member.name.split("/")
                top = top or parts[0]
                if member.name.startswith("/") or ".." in parts or parts[0] != top or len(parts) < 2 and member.isfile():
                    raise refuse(f"holds {member.name}, outside the chart's folder")
                if len(parts) == 2 and parts[1] == name and member.isfile() and found is None:
                    f = tar.extractfile(member)
                    found = f.read() if f is not None else None
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise refuse(f"cannot be read: {exc}") from exc
    return found
