"""A cache folder that cannot be written is bad input (exit 2, one line naming the folder and
GPU_CATALOG_CACHE), never a traceback from whichever module wrote to it first."""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import pytest

from gpucatalog import cli
from gpucatalog.core import cachedir


def test_a_cache_folder_behind_a_file_is_exit_2_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # tests run as root, for whom permissions do not stop a write: a file in the way does
    (tmp_path / "file").write_text("x")
    cache = tmp_path / "file" / "cache"
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(cache))
    assert cli.main(["cluster", "up", "--nodes", "1", "--name", "cache-test"]) == 2
    err = capsys.readouterr().err
    assert f"the cache folder {cache} cannot be written" in err
    assert "GPU_CATALOG_CACHE" in err and "Traceback" not in err


def test_read_only_cache_errors_are_named_and_others_are_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path))
    ro = cachedir.unusable(OSError(errno.EROFS, "Read-only file system", str(tmp_path / "toolchain")))
    assert ro is not None and ro.exit_code == 2 and str(tmp_path) in str(ro)
    # an error outside the cache folder, or one that is not about writing, stays a bug
    assert cachedir.unusable(OSError(errno.EROFS, "Read-only file system", "/elsewhere")) is None
    assert cachedir.unusable(OSError(errno.EIO, "I/O error", str(tmp_path / "x"))) is None


def test_a_second_builder_waits_for_the_first_and_finds_the_artifact_made(tmp_path: Path) -> None:
    """Two test workers building the same cached layer: one builds, the other uses what it made."""
    out = tmp_path / "kind-node" / "python-site-abc.tar"
    entered = threading.Event()
    seen: list[bool] = []

    def second() -> None:
        with cachedir.building(out) as needed:
            seen.append(needed)

    with cachedir.building(out) as needed:
        assert needed
        other = threading.Thread(target=lambda: (entered.set(), second()))
        other.start()
        entered.wait(10)
        assert not seen  # still waiting on the first builder's lock
        out.write_bytes(b"layer")
    other.join(10)
    assert seen == [False] and out.read_bytes() == b"layer"
