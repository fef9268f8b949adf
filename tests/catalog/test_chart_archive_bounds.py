"""A pinned remote chart's archive is read within bounds: one that inflates to GiB, has too many
entries, holds a link, or a path outside the chart's folder is bad input (exit 2) naming the
chart and the limit, before it is inflated (its digest only says the bytes are the pinned ones)."""

from __future__ import annotations

import io
import tarfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from gpucatalog.catalog import charts, loader
from gpucatalog.core import errors
from tests.catalog.test_render import _remote_catalog


class _Zeros(io.RawIOBase):
    def __init__(self, size: int) -> None:
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def _file(tar: tarfile.TarFile, name: str, size: int) -> None:
    tar.addfile(tarfile.TarInfo(name) if size == 0 else _info(name, size), _Zeros(size) if size else None)


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def _link(tar: tarfile.TarFile) -> None:
    info = tarfile.TarInfo("demo/values.yaml")
    info.type, info.linkname = tarfile.SYMTYPE, "/etc/shadow"
    tar.addfile(info)


def _bomb(tar: tarfile.TarFile) -> None:
    _file(tar, "demo/Chart.yaml", 0)
    _file(tar, "demo/values.yaml", 300 << 20)  # 300 MiB of zeros: a few hundred KiB packed


def _many(tar: tarfile.TarFile) -> None:
    for i in range(charts.MAX_MEMBERS + 1):
        _file(tar, f"demo/templates/t{i}.yaml", 0)


def _outside(tar: tarfile.TarFile) -> None:
    _file(tar, "demo/Chart.yaml", 0)
    _file(tar, "demo/../../escape.yaml", 0)


@pytest.mark.parametrize(("build", "why"), [
    (_bomb, "inflates to more than 100 MiB"),
    (_many, f"more than {charts.MAX_MEMBERS} entries"),
    (_link, "neither a file nor a folder"),
    (_outside, "outside the chart's folder"),
])
def test_a_hostile_pinned_archive_is_refused_naming_chart_and_limit(
        mini_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        build: Callable[[tarfile.TarFile], None], why: str) -> None:
    tgz = _remote_catalog(mini_catalog, tmp_path, monkeypatch, None)
    old = charts.sha256_file(tgz)
    with tarfile.open(tgz, "w:gz", compresslevel=1) as tar:
        build(tar)
    f = mini_catalog / "components" / "alpha" / "1.0.0.yaml"
    f.write_text(f.read_text().replace(old, charts.sha256_file(tgz)))  # pinned: only the bounds refuse it
    cat = loader.load_catalog(mini_catalog)
    tracemalloc.start()
    try:
        with pytest.raises(errors.InputError) as exc:
            charts.resolve(cat, cat.versions[("alpha", "1.0.0")])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert why in str(exc.value) and "oci://registry.invalid/charts/demo 0.1.0" in str(exc.value)
    assert peak < 64 << 20
