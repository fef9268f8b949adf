"""``--upgrade-from CHANNEL``: the channel's newest version of the bundle, its entry verified
(digest and signed evidence) before anything starts; an empty channel, a version that is not
older, and an entry whose bundle changed after promotion are refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpucatalog.catalog import loader
from gpucatalog.core import errors
from gpucatalog.pipelines import keys, promote, trust, upgrade

MakeEvidence = Callable[..., Path]
DIGEST_A = "sha256:" + "a1" * 32


@pytest.fixture
def promoted(repo_copy: Path, make_evidence: MakeEvidence, ci_key: keys.GeneratedKey) -> Path:
    """gpu-queueing 0.1.0 in candidate and stable, certified (as far as this test knows) at DIGEST_A."""
    trust.add_key(repo_copy / "trust.yaml", "ci", keys.load_public(ci_key.public_path), ["candidate", "stable"])
    ev = make_evidence(bundle="gpu-queueing", version="0.1.0")
    for channel in ("candidate", "stable"):
        promote.promote("gpu-queueing", "0.1.0", channel, [ev], lambda _p: DIGEST_A, catalog_dir=repo_copy,
                        bundle_suites=(), promoted_by="test@host")
    return repo_copy


def _resolve(catalog: Path, spec: str, new: str = "0.2.0", digest: str = DIGEST_A) -> upgrade.From:
    cat = loader.load_catalog(catalog)
    return upgrade.resolve_from(cat, "gpu-queueing", new, spec, "sim", lambda _v, _p: digest)


def test_channel_resolves_to_its_newest_version_with_a_verified_entry(promoted: Path) -> None:
    frm = _resolve(promoted, "stable")
    assert frm.version == "0.1.0" and frm.channel == "stable"
    assert frm.certificate is not None and frm.certificate.signer == "ci" and frm.certificate.digest == DIGEST_A
    # a version a channel holds is verified too
    assert _resolve(promoted, "0.1.0").certificate is not None


def test_entry_that_no_longer_matches_the_render_is_refused(promoted: Path) -> None:
    with pytest.raises(errors.CheckFailed) as exc:
        _resolve(promoted, "stable", digest="sha256:" + "d4" * 32)
    assert any(f.rule == "digest" for f in exc.value.findings)


def test_empty_channel_and_a_version_not_older_are_bad_input(repo_copy: Path) -> None:
    with pytest.raises(errors.InputError) as exc:
        _resolve(repo_copy, "stable")
    assert "channel 'stable' has no version of gpu-queueing" in str(exc.value)
    with pytest.raises(errors.InputError) as exc:
        _resolve(repo_copy, "0.2.0")
    assert "is not older than gpu-queueing@0.2.0" in str(exc.value)
    assert _resolve(repo_copy, "0.1.0").certificate is None  # in no channel: installed uncertified
