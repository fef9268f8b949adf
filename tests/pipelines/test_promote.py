"""The promotion gate, and every attack the issue lists: nothing is promoted, the channel file
stays byte-identical, and the error lists every unmet requirement."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.core import errors
from gpucatalog.pipelines import channels, evidence, policy, promote, trust

MakeEvidence = Callable[..., Path]
DIGEST_A = "sha256:" + "a1" * 32
DIGEST_B = "sha256:" + "b2" * 32


def _promote(catalog_dir: Path, channel: str, paths: list[Path], fresh: str = DIGEST_A,
             ref: tuple[str, str] = ("gpu-scheduling", "0.1.0"), bundle_suites: tuple[str, ...] = ()) -> dict[str, Any]:
    return promote.promote(
        ref[0], ref[1], channel, paths, lambda _profile: fresh, catalog_dir=catalog_dir,
        bundle_suites=bundle_suites, promoted_by="test@host",
    )


def _snapshot(catalog_dir: Path) -> dict[str, bytes]:
    return {p.relative_to(catalog_dir).as_posix(): p.read_bytes()
            for p in sorted((catalog_dir / "channels").rglob("*")) if p.is_file()}


def _refused(catalog_dir: Path, channel: str, paths: list[Path], **kw: Any) -> list[str]:
    before = _snapshot(catalog_dir)
    with pytest.raises(errors.CheckFailed) as exc:
        _promote(catalog_dir, channel, paths, **kw)
    assert _snapshot(catalog_dir) == before, "a refused promotion changed the channel files"
    assert exc.value.exit_code == 1
    return [str(f) for f in exc.value.findings]


def test_candidate_then_stable(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    ev = make_evidence()
    entry = _promote(catalog_dir, "candidate", [ev])
    assert entry["digest"] == DIGEST_A and entry["promotedBy"] == "test@host"
    assert entry["evidenceDigest"] == evidence.load(ev)[1]
    before = (catalog_dir / "channels" / "candidate.yaml").read_bytes()
    _promote(catalog_dir, "stable", [ev])
    assert channels.load(catalog_dir / "channels", "stable").versions("gpu-scheduling") == ["0.1.0"]
    # Appending 0.2.0 keeps the earlier bytes verbatim (append-only).
    _promote(catalog_dir, "candidate", [make_evidence(version="0.2.0")], ref=("gpu-scheduling", "0.2.0"))
    after = (catalog_dir / "channels" / "candidate.yaml").read_bytes()
    assert after.startswith(before) and len(after) > len(before)
    assert channels.load(catalog_dir / "channels", "candidate").versions("gpu-scheduling") == ["0.1.0", "0.2.0"]


def test_bad_signature(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    ev = make_evidence()
    env = json.loads((ev / evidence.ENVELOPE).read_text())
    sig = env["signatures"][0]["sig"]
    env["signatures"][0]["sig"] = ("B" if sig[0] != "B" else "C") + sig[1:]
    (ev / evidence.ENVELOPE).write_text(json.dumps(env))
    found = _refused(catalog_dir, "candidate", [ev])
    assert any("bad signature" in f for f in found)


def test_untrusted_key(catalog_dir: Path, make_evidence: MakeEvidence, rogue_key: Any) -> None:
    found = _refused(catalog_dir, "candidate", [make_evidence(key=rogue_key.private_path)])
    assert any("untrusted key" in f for f in found)


def test_key_trusted_only_for_candidate_cannot_sign_for_stable(
    catalog_dir: Path, make_evidence: MakeEvidence, rogue_key: Any
) -> None:
    from gpucatalog.pipelines import keys
    trust.add_key(catalog_dir / "trust.yaml", "rogue", keys.load_public(rogue_key.public_path), ["candidate"])
    ev = make_evidence(key=rogue_key.private_path)
    _promote(catalog_dir, "candidate", [ev])
    found = _refused(catalog_dir, "stable", [ev])
    assert any("untrusted key" in f for f in found)


def test_evidence_for_a_different_digest(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    found = _refused(catalog_dir, "candidate", [make_evidence(digest=DIGEST_B)])
    assert any("[digest]" in f and DIGEST_B in f for f in found)


def test_bundle_edited_after_certification(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    ev = make_evidence()  # certified as DIGEST_A; the catalog now renders to DIGEST_B
    found = _refused(catalog_dir, "candidate", [ev], fresh=DIGEST_B)
    assert any("changed after certification" in f for f in found)


def test_failed_required_suite(catalog_dir: Path, make_evidence: MakeEvidence, suites: list[Any]) -> None:
    found = _refused(catalog_dir, "candidate", [make_evidence(suites=suites)], bundle_suites=("gang",))
    assert any("required suite 'gang' failed" in f and "reclaim-over-quota" in f for f in found)


def test_missing_required_suite(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    found = _refused(catalog_dir, "candidate", [make_evidence()], bundle_suites=("slurm",))
    assert any("required suite 'slurm' was not run" in f for f in found)


def test_replay_from_another_bundle(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    found = _refused(catalog_dir, "candidate", [make_evidence(bundle="slurm")])
    assert any("evidence is for 'slurm@0.1.0', not 'gpu-scheduling@0.1.0'" in f for f in found)
    found = _refused(catalog_dir, "candidate", [make_evidence(version="0.0.9")])
    assert any("not 'gpu-scheduling@0.1.0'" in f for f in found)


def test_missing_profile(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    found = _refused(catalog_dir, "candidate", [make_evidence(profile="kind")])
    assert any("no passing evidence for required profile 'sim'" in f for f in found)


def test_stable_only_accepts_what_is_in_candidate(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    found = _refused(catalog_dir, "stable", [make_evidence()])
    assert any("is not in 'candidate'" in f for f in found)


def test_every_unmet_requirement_is_listed(catalog_dir: Path, make_evidence: MakeEvidence, rogue_key: Any) -> None:
    found = _refused(catalog_dir, "stable", [make_evidence(key=rogue_key.private_path), make_evidence(digest=DIGEST_B)],
                     bundle_suites=("slurm",))
    rules = {f.split("]")[0] + "]" for f in found}
    assert {"[trust]", "[digest]", "[required-suite]", "[required-profile]", "[source-channel]"} <= rules


def test_already_promoted_is_refused(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    ev = make_evidence()
    _promote(catalog_dir, "candidate", [ev])
    found = _refused(catalog_dir, "candidate", [ev])
    assert any("already in 'candidate'" in f for f in found)


def test_truncated_channel_file_is_bad_input(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    ev = make_evidence()
    _promote(catalog_dir, "candidate", [ev])
    _promote(catalog_dir, "candidate", [make_evidence(version="0.2.0")], ref=("gpu-scheduling", "0.2.0"))
    path = catalog_dir / "channels" / "candidate.yaml"
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 30, 10, 0):
        path.write_bytes(data[:cut])
        with pytest.raises(errors.InputError) as exc:
            _promote(catalog_dir, "candidate", [make_evidence(version="0.3.0")], ref=("gpu-scheduling", "0.3.0"))
        assert exc.value.exit_code == 2 and "candidate.yaml" in str(exc.value)
        assert path.read_bytes() == data[:cut]


def test_unknown_channel(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    with pytest.raises(errors.NotFoundError, match="unknown channel 'nightly'") as exc:
        _promote(catalog_dir, "nightly", [make_evidence()])
    assert exc.value.exit_code == 2
    assert not (catalog_dir / "channels" / "nightly.yaml").exists()


def test_policy_schema_errors(tmp_path: Path) -> None:
    p = tmp_path / "policy.yaml"
    p.write_text(yaml.safe_dump({"apiVersion": "gpu-catalog.dev/v1alpha1", "kind": "PromotionPolicy",
                                 "channels": {"stable": {"requiredProfiles": ["sim"], "sourceChannel": "cand"}}}))
    with pytest.raises(errors.SchemaError, match="sourceChannel 'cand'"):
        policy.load(p)
    p.write_text(yaml.safe_dump({"apiVersion": "gpu-catalog.dev/v1alpha1", "kind": "PromotionPolicy",
                                 "channels": {"stable": {"requiredProfile": ["sim"]}}}))
    with pytest.raises(errors.SchemaError):
        policy.load(p)


def _worker(catalog_dir: str, version: str, ev: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    try:
        _promote(Path(catalog_dir), "candidate", [Path(ev)], ref=("gpu-scheduling", version))
        out.put((version, "ok"))
    except errors.CatalogError as exc:
        out.put((version, str(exc)))


def test_concurrent_promotions_lose_no_entry(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    versions = [f"0.{i}.0" for i in range(1, 7)]
    evs = {v: make_evidence(version=v) for v in versions}
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(len(versions) + 1)  # +1 for a duplicate of 0.1.0 racing the original
    out = ctx.Queue()
    jobs = [ctx.Process(target=_worker, args=(str(catalog_dir), v, str(evs[v]), barrier, out)) for v in versions]
    jobs.append(ctx.Process(target=_worker, args=(str(catalog_dir), "0.1.0", str(evs["0.1.0"]), barrier, out)))
    for j in jobs:
        j.start()
    for j in jobs:
        j.join(60)
    results = [out.get(timeout=5) for _ in jobs]
    assert sorted(v for v, r in results if r == "ok") == versions  # exactly one 0.1.0 won
    assert sum(1 for v, r in results if r != "ok") == 1
    ch = channels.load(catalog_dir / "channels", "candidate")
    assert sorted(ch.versions("gpu-scheduling")) == versions
    assert not [p for p in (catalog_dir / "channels").iterdir() if p.name.endswith(".tmp")]


def test_stable_refuses_a_digest_other_than_the_one_in_candidate(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    _promote(catalog_dir, "candidate", [make_evidence()])
    # The bundle was edited after entering candidate and re-certified: valid evidence, wrong lineage.
    found = _refused(catalog_dir, "stable", [make_evidence(digest=DIGEST_B)], fresh=DIGEST_B)
    assert any("[source-channel]" in f and f"with digest {DIGEST_A}" in f for f in found)


def _require_minors(catalog_dir: Path, minors: list[str]) -> None:
    path = catalog_dir / "channels" / "policy.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["channels"]["candidate"]["requiredKubernetes"] = minors
    path.write_text(yaml.safe_dump(doc))


def test_a_channel_may_require_kubernetes_minors(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    _require_minors(catalog_dir, ["1.35", "1.36"])
    on_136 = make_evidence(kubernetes="v1.36.3")
    found = _refused(catalog_dir, "candidate", [on_136])
    assert len(found) == 1 and "no passing evidence on Kubernetes 1.35" in found[0]
    # a failing 1.35 run does not count as 1.35
    failing = make_evidence(kubernetes="v1.35.4", suites=[{"name": "fractional_gpu", "cases": [
        {"name": "c", "result": "failed", "reason": "x"}]}])
    assert any("Kubernetes 1.35" in f for f in _refused(catalog_dir, "candidate", [on_136, failing]))
    entry = _promote(catalog_dir, "candidate", [on_136, make_evidence(kubernetes="v1.35.4")])
    assert sorted(i["kubernetes"] for i in entry["evidence"]) == ["1.35.4", "1.36.3"]
    # the channel file (with the release per evidence) loads back
    assert channels.load(catalog_dir / "channels", "candidate").versions("gpu-scheduling") == ["0.1.0"]


def test_exploratory_evidence_is_refused(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    found = _refused(catalog_dir, "candidate", [make_evidence(kubernetes="v1.37.2", exploratory=True)])
    assert any("exploratory" in f and "--outside-range" in f for f in found)


def test_a_required_minor_must_be_a_minor(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("apiVersion: gpu-catalog.dev/v1alpha1\nkind: PromotionPolicy\nchannels:\n"
                    "  candidate: {requiredProfiles: [sim], requiredKubernetes: ['1.35.4']}\n")
    with pytest.raises(errors.InputError):
        policy.load(path)
