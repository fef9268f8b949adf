"""Atomic volume folders (what a kubelet does for ConfigMap, Secret and projected volumes): a
reader holding the folder sees every update, keys come and go, and an unchanged payload is not
rewritten."""

from __future__ import annotations

import os
from pathlib import Path

from gpucatalog.clusters.sim import atomicdir


def test_first_write_then_update_through_the_same_folder(tmp_path: Path) -> None:
    vol = tmp_path / "tls"
    assert atomicdir.write(vol, {}) is True  # an empty Secret still gives a folder
    assert atomicdir.current(vol) == {} and [p.name for p in vol.iterdir() if not p.name.startswith("..")] == []
    held = os.open(vol, os.O_RDONLY)  # a bind mount keeps this inode
    try:
        assert atomicdir.write(vol, {"tls.crt": b"A", "sub/ca.crt": b"C"}) is True
        assert (Path(f"/proc/self/fd/{held}") / "tls.crt").read_bytes() == b"A"
        assert (vol / "sub" / "ca.crt").read_bytes() == b"C"
        assert os.readlink(vol / "tls.crt") == "..data/tls.crt"
        assert atomicdir.write(vol, {"tls.crt": b"B"}) is True
        assert (Path(f"/proc/self/fd/{held}") / "tls.crt").read_bytes() == b"B"
    finally:
        os.close(held)
    assert not (vol / "sub").exists()  # a key that went away is gone
    stamped = [p for p in vol.iterdir() if p.name.startswith("..") and p.name != atomicdir.DATA]
    assert len(stamped) == 1  # old payloads are removed


def test_unchanged_payload_is_not_rewritten(tmp_path: Path) -> None:
    vol = tmp_path / "cfg"
    atomicdir.write(vol, {"a": b"1"})
    target = os.readlink(vol / atomicdir.DATA)
    assert atomicdir.write(vol, {"a": b"1"}) is False
    assert os.readlink(vol / atomicdir.DATA) == target


def test_plain_files_of_an_older_layout_are_replaced(tmp_path: Path) -> None:
    vol = tmp_path / "v"
    vol.mkdir()
    (vol / "a").write_bytes(b"old")
    assert atomicdir.write(vol, {"a": b"new"}) is True
    assert (vol / "a").is_symlink() and (vol / "a").read_bytes() == b"new"
