"""The ``requireUpgradeFrom`` gate: a version enters a channel only with evidence of a certified
upgrade from the version newest in the named channel; a first version needs none."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.core import errors
from gpucatalog.pipelines import channels, policy, promote

MakeEvidence = Callable[..., Path]
DIGEST_A = "sha256:" + "a1" * 32
DIGEST_B = "sha256:" + "b2" * 32
REF = "gpu-scheduling"


@pytest.fixture
def gated(catalog_dir: Path) -> Path:
    path = catalog_dir / "channels" / "policy.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["channels"]["stable"]["requireUpgradeFrom"] = "stable"
    path.write_text(yaml.safe_dump(doc))
    return catalog_dir


def _promote(catalog_dir: Path, channel: str, version: str, paths: list[Path], fresh: str) -> dict[str, Any]:
    return promote.promote(REF, version, channel, paths, lambda _p: fresh, catalog_dir=catalog_dir,
                           promoted_by="test@host")


def _upgrade(version: str, digest: str) -> dict[str, Any]:
    return {"upgradeFrom": {"bundle": REF, "version": version, "digest": digest},
            "upgrade": {"mode": "upgrade", "upgrade": {"wallSeconds": 12.0, "schedulingGapSeconds": 3.0}}}


def _stable_has_010(gated: Path, make_evidence: MakeEvidence) -> None:
    first = make_evidence()
    _promote(gated, "candidate", "0.1.0", [first], DIGEST_A)
    entry = _promote(gated, "stable", "0.1.0", [first], DIGEST_A)  # a first version needs no upgrade
    assert "upgradeFrom" not in entry


def test_a_version_without_upgrade_evidence_is_refused(gated: Path, make_evidence: MakeEvidence) -> None:
    _stable_has_010(gated, make_evidence)
    plain = make_evidence(version="0.2.0", digest=DIGEST_B)
    _promote(gated, "candidate", "0.2.0", [plain], DIGEST_B)  # candidate does not ask for it
    before = (gated / "channels" / "stable.yaml").read_bytes()
    with pytest.raises(errors.CheckFailed) as exc:
        _promote(gated, "stable", "0.2.0", [plain], DIGEST_B)
    found = [str(f) for f in exc.value.findings]
    assert any("[upgrade-from]" in f and "from gpu-scheduling@0.1.0" in f and "--upgrade-from stable" in f
               for f in found), found
    assert (gated / "channels" / "stable.yaml").read_bytes() == before


def test_upgrade_evidence_from_another_version_or_digest_is_refused(gated: Path, make_evidence: MakeEvidence) -> None:
    _stable_has_010(gated, make_evidence)
    plain = make_evidence(version="0.2.0", digest=DIGEST_B)
    _promote(gated, "candidate", "0.2.0", [plain], DIGEST_B)
    wrong_version = make_evidence(version="0.2.0", digest=DIGEST_B, extra=_upgrade("0.0.9", DIGEST_A))
    # 0.1.0 as rendered some other way than stable certified it
    wrong_digest = make_evidence(version="0.2.0", digest=DIGEST_B, extra=_upgrade("0.1.0", "sha256:" + "c3" * 32))
    for ev in (wrong_version, wrong_digest):
        with pytest.raises(errors.CheckFailed) as exc:
            _promote(gated, "stable", "0.2.0", [plain, ev], DIGEST_B)
        assert any(f.rule == "upgrade-from" for f in exc.value.findings)


def test_certified_upgrade_from_stable_promotes_and_is_recorded(gated: Path, make_evidence: MakeEvidence) -> None:
    _stable_has_010(gated, make_evidence)
    up = make_evidence(version="0.2.0", digest=DIGEST_B, extra=_upgrade("0.1.0", DIGEST_A))
    _promote(gated, "candidate", "0.2.0", [up], DIGEST_B)
    entry = _promote(gated, "stable", "0.2.0", [up], DIGEST_B)
    assert entry["upgradeFrom"]["channel"] == "stable" and entry["upgradeFrom"]["version"] == "0.1.0"
    assert entry["upgradeFrom"]["digest"] == DIGEST_A
    # the entry round-trips through the channel file's schema, and its evidence is kept
    stored = channels.load(gated / "channels", "stable").find(REF, "0.2.0")
    assert stored is not None and stored["upgradeFrom"] == entry["upgradeFrom"]
    assert channels.stored_evidence(gated / "channels", entry["upgradeFrom"]["evidenceDigest"]).is_file()


def test_require_upgrade_from_must_name_a_channel(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "gpu-catalog.dev/v1alpha1", "kind": "PromotionPolicy",
                                    "channels": {"stable": {"requiredProfiles": ["sim"], "requireUpgradeFrom": "lts"}}}))
    with pytest.raises(errors.SchemaError) as exc:
        policy.load(path)
    assert "requireUpgradeFrom" in str(exc.value)


def test_shipped_policy_gates_stable_on_upgrades() -> None:
    shipped = policy.load(Path(__file__).resolve().parents[2] / "catalog" / "channels" / "policy.yaml")
    assert shipped.channel("stable").require_upgrade_from == "stable"
    assert shipped.channel("candidate").require_upgrade_from is None


def test_no_other_policy_can_drop_the_gate(gated: Path, make_evidence: MakeEvidence, tmp_path: Path) -> None:
    _stable_has_010(gated, make_evidence)
    plain = make_evidence(version="0.2.0", digest=DIGEST_B)
    _promote(gated, "candidate", "0.2.0", [plain], DIGEST_B)
    lax_path = tmp_path / "lax.yaml"
    doc = yaml.safe_load((gated / "channels" / "policy.yaml").read_text())
    del doc["channels"]["stable"]["requireUpgradeFrom"]
    lax_path.write_text(yaml.safe_dump(doc))
    with pytest.raises(errors.InputError):  # a laxer policy judges only a dry run
        promote.promote(REF, "0.2.0", "stable", [plain], lambda _p: DIGEST_B, catalog_dir=gated,
                        policy_file=policy.load(lax_path))
    assert channels.load(gated / "channels", "stable").find(REF, "0.2.0") is None
