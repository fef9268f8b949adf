"""``catalog list --channels`` and the channels of ``catalog show`` (issue 28, item 3): which
channels hold a bundle version, certified where and by whom, and whether its stored evidence and
today's render still match the entry."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gpucatalog.catalog import loader, render
from gpucatalog.cli import main
from gpucatalog.pipelines import channels, keys, promote, trust

pytestmark = pytest.mark.toolchain  # the fresh render runs the pinned helm

MakeEvidence = Callable[..., Path]
DIGEST_A = "sha256:" + "a1" * 32


def test_shipped_catalog_says_nothing_is_promoted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--channels"]) == 0
    assert capsys.readouterr().out.strip() == "no bundle version is promoted to any channel"
    assert main(["list", "--channels", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.fixture
def promoted(repo_copy: Path, make_evidence: MakeEvidence, ci_key: keys.GeneratedKey) -> Path:
    """gpu-queueing 0.1.0 in candidate at its real digest (Kubernetes 1.36.3), and 0.2.0 at a digest
    it does not render to."""
    trust.add_key(repo_copy / "trust.yaml", "ci", keys.load_public(ci_key.public_path), ["candidate", "stable"])
    digest = render.render_bundle(loader.load_catalog(repo_copy), "gpu-queueing@0.1.0", "sim").digest
    for version, d in (("0.1.0", digest), ("0.2.0", DIGEST_A)):
        ev = make_evidence(bundle="gpu-queueing", version=version, digest=d, kubernetes="v1.36.3")
        promote.promote("gpu-queueing", version, "candidate", [ev], lambda _p, d=d: d,  # type: ignore[misc]
                        catalog_dir=repo_copy, bundle_suites=(), promoted_by="test@host")
    return repo_copy


def _listed(catalog: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[dict[str, object]]]:
    rc = main(["--catalog-dir", str(catalog), "list", "--channels", "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_promoted_entry_verifies_and_a_changed_bundle_does_not(
    promoted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, rows = _listed(promoted, capsys)
    assert rc == 1  # 0.2.0 no longer renders to what was certified
    by_version = {r["version"]: r for r in rows}
    good = by_version["0.1.0"]
    assert good["ok"] is True and good["channel"] == "candidate" and good["promoted_by"] == "test@host"
    [profile] = good["profiles"]  # type: ignore[misc]
    assert profile["profile"] == "sim" and profile["kubernetes"] == "1.36.3" and profile["signer"] == "ci"
    assert profile["evidence_verifies"] is True and profile["renders_same"] is True
    bad = by_version["0.2.0"]["profiles"][0]  # type: ignore[index]
    assert bad["evidence_verifies"] is True and bad["renders_same"] is False
    assert "renders today to" in bad["problems"][0]

    assert main(["--catalog-dir", str(promoted), "show", "gpu-queueing@0.1.0"]) == 0
    out = capsys.readouterr().out
    assert "candidate" in out and "verifies, renders the same" in out


def test_tampered_stored_evidence_does_not_verify(promoted: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entry = channels.load(promoted / "channels", "candidate").find("gpu-queueing", "0.1.0")
    assert entry is not None
    stored = channels.stored_evidence(promoted / "channels", entry["evidenceDigest"])
    stored.write_bytes(stored.read_bytes().replace(b'"payload"', b'"payload" ', 1))
    rc, rows = _listed(promoted, capsys)
    assert rc == 1
    row = next(r for r in rows if r["version"] == "0.1.0")
    p = row["profiles"][0]  # type: ignore[index]
    assert p["evidence_verifies"] is False and p["renders_same"] is True
    assert any("does not match the entry's digest" in m for m in p["problems"])
    assert main(["--catalog-dir", str(promoted), "list", "--channels"]) == 1
    assert "DOES NOT VERIFY" in capsys.readouterr().out
