"""Channels are append-only in fact (issue 14, attack 4): for every malformed or unusual shape of
a channel file, a promotion either refuses (exit 2, every file byte-identical) or appends so that
the file parses back to exactly the earlier entries plus the new one. Never an entry lost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.core import errors
from gpucatalog.pipelines import channels, promote

DIGEST_A = "sha256:" + "a1" * 32
MakeEvidence = Callable[..., Path]


def _promote(catalog_dir: Path, version: str, ev: Path) -> dict[str, Any]:
    return promote.promote("gpu-scheduling", version, "candidate", [ev], lambda _p: DIGEST_A,
                           catalog_dir=catalog_dir, promoted_by="t@h")


@pytest.fixture
def seeded(catalog_dir: Path, make_evidence: MakeEvidence) -> tuple[Path, str, list[dict[str, Any]]]:
    """candidate.yaml holding two real entries (0.1.0, 0.2.0); returns (path, text, entries)."""
    for v in ("0.1.0", "0.2.0"):
        _promote(catalog_dir, v, make_evidence(version=v))
    path = catalog_dir / "channels" / "candidate.yaml"
    return path, path.read_text(), list(channels.load(catalog_dir / "channels", "candidate").entries)


def _entry_yaml(entry: dict[str, Any], indent: str = "") -> str:
    return "".join(indent + line + "\n" for line in yaml.safe_dump([entry], sort_keys=False).splitlines())


REFUSED: dict[str, Callable[[str, list[dict[str, Any]]], str]] = {
    "duplicate entries key": lambda t, e: t + "entries: []\n",
    "duplicate entries key first": lambda t, e: t.replace("entries:\n", "entries: []\nentries:\n"),
    "duplicate key inside an entry": lambda t, e: t.replace("  version: 0.1.0\n", "  version: 0.1.0\n  version: 0.0.1\n"),
    "duplicate channel key": lambda t, e: t.replace("channel: candidate\n", "channel: candidate\nchannel: stable\n"),
    "second document": lambda t, e: t + "---\n" + t,
    "entries not a list": lambda t, e: t.split("entries:")[0] + "entries: {a: 1}\n",
    "entry missing a field": lambda t, e: t.replace("  trustDigest:", "  x-trustDigest:", 1),
    "entry without evidence list": lambda t, e: t.replace("  evidence:\n", "  evidence: []\n", 1).split("  - profile")[0],
    "wrong channel name": lambda t, e: t.replace("channel: candidate", "channel: stable"),
    "tab indentation": lambda t, e: t.replace("  version: 0.1.0", "\tversion: 0.1.0"),
    "truncated mid entry": lambda t, e: t[: len(t) - 40],
    "alias bomb in an entry": lambda t, e: t + "  x: &l0 [a]\n" + "".join(
        f"  x{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 8)),
    "not UTF-8": lambda t, e: t.replace("promotedBy: t@h", "promotedBy: t@h\udcff"),
    "empty file": lambda t, e: "",
}

APPENDED: dict[str, Callable[[str, list[dict[str, Any]]], str]] = {
    "as written": lambda t, e: t,
    "no final newline": lambda t, e: t.rstrip("\n"),
    "comments everywhere": lambda t, e: "# channel\n" + t.replace("entries:\n", "entries: # the list\n") + "# end\n",
    "entries not last": lambda t, e: "entries:\n" + t.split("entries:\n")[1] + t.split("entries:\n")[0],
    "flow-style entries": lambda t, e: t.split("entries:")[0] + "entries: " + yaml.safe_dump(e, default_flow_style=True),
    "document end marker": lambda t, e: t + "...\n",
    "indented list": lambda t, e: t.split("entries:\n")[0] + "entries:\n" + "".join(_entry_yaml(x, "    ") for x in e),
    "CRLF line ends": lambda t, e: t.replace("\n", "\r\n"),
    "anchor and alias": lambda t, e: t.replace("  evidence:\n", "  evidence: &ev\n", 1),
}


@pytest.mark.parametrize("shape", sorted(REFUSED))
def test_malformed_shape_is_refused_and_untouched(seeded: tuple[Path, str, list[dict[str, Any]]],
                                                  make_evidence: MakeEvidence, shape: str) -> None:
    path, text, entries = seeded
    bad = REFUSED[shape](text, entries)
    path.write_bytes(bad.encode(errors="surrogateescape"))
    before = sorted(p.name for p in path.parent.rglob("*"))
    raw = path.read_bytes()
    with pytest.raises(errors.InputError) as exc:
        _promote(path.parent.parent, "0.3.0", make_evidence(version="0.3.0"))
    assert exc.value.exit_code == 2 and "candidate.yaml" in str(exc.value)
    assert path.read_bytes() == raw and sorted(p.name for p in path.parent.rglob("*")) == before


@pytest.mark.parametrize("shape", sorted(APPENDED))
def test_unusual_shape_appends_without_losing_an_entry(seeded: tuple[Path, str, list[dict[str, Any]]],
                                                       make_evidence: MakeEvidence, shape: str) -> None:
    path, text, entries = seeded
    path.write_text(APPENDED[shape](text, entries), newline="")
    before = list(channels.load(path.parent, "candidate").entries)
    assert before == entries  # the shape itself reads back as the same entries
    new = _promote(path.parent.parent, "0.3.0", make_evidence(version="0.3.0"))
    assert list(channels.load(path.parent, "candidate").entries) == [*entries, new]


def test_symlinked_channel_file_is_refused(seeded: tuple[Path, str, list[dict[str, Any]]], make_evidence: MakeEvidence,
                                           tmp_path: Path) -> None:
    path, text, _entries = seeded
    elsewhere = tmp_path / "elsewhere.yaml"
    elsewhere.write_text(text)
    path.unlink()
    path.symlink_to(elsewhere)
    with pytest.raises(errors.InputError, match="is a symlink"):
        _promote(path.parent.parent, "0.3.0", make_evidence(version="0.3.0"))
    assert elsewhere.read_text() == text
