"""The one judge of evidence (issue 25), and the attacks on how evidence was judged before it:
rollback evidence certifying the new version (1), a matrix cell green from a subset of the
suites (4), ``conformance-report --signing-key`` trusting its own key (5), malformed evidence
crashing its readers (9), and the channel policy on binaries a user supplied."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpucatalog import cli
from gpucatalog.cli import promote as promote_cli
from gpucatalog.core import errors
from gpucatalog.pipelines import ai_conformance, evidence, judge, keys, matrix, policy, promote, upgrade
from gpucatalog.validators.conformance.kit import base

MakeEvidence = Callable[..., Path]
DIGEST_A = "sha256:" + "a1" * 32
OLD = {"bundle": "gpu-scheduling", "version": "0.0.9", "digest": "sha256:" + "09" * 32}


def _claim(ci_key: keys.GeneratedKey, **kw: Any) -> judge.Claim:
    pub = keys.load_public(ci_key.public_path)
    return judge.Claim("gpu-scheduling", "0.1.0", {keys.keyid(pub): pub}, lambda _p: DIGEST_A, **kw)


def _upgrade_evidence(make_evidence: MakeEvidence, passing: list[base.SuiteResult], mode: str) -> Path:
    """Evidence as ``certify B@0.1.0 --upgrade-from 0.0.9 [--rollback]`` writes it."""
    upgraded = base.SuiteResult("upgrade", [base.CaseResult("upgrade-pending-admitted", "passed")])
    final = SimpleNamespace(suites=tuple(s.name for s in passing),
                            ref="gpu-scheduling@" + ("0.0.9" if mode == "rollback" else "0.1.0"))
    suites = upgrade.ran_on([upgraded, *passing], final)  # type: ignore[arg-type]
    return make_evidence(suites=suites, extra={"upgradeFrom": OLD, "upgrade": {"mode": mode}})


def test_rollback_evidence_proves_the_upgrade_never_the_new_versions_suites(
    catalog_dir: Path, make_evidence: MakeEvidence, passing_suites: list[base.SuiteResult],
    ci_key: keys.GeneratedKey,
) -> None:
    """Attack 1: ``certify B@NEW --upgrade-from OLD --rollback`` ends on OLD and runs its suites
    there; the signed subject is NEW. That evidence promoted NEW (exit 0); now refused (exit 1)."""
    rollback = _upgrade_evidence(make_evidence, passing_suites, "rollback")
    st = json.loads((rollback / evidence.STATEMENT).read_text())
    assert {s["name"]: s["ranOn"] for s in st["predicate"]["suites"]} == {
        "upgrade": "gpu-scheduling@0.1.0", "fractional_gpu": "gpu-scheduling@0.0.9",
        "fault_remediation": "gpu-scheduling@0.0.9"}
    v = judge.judge(rollback, _claim(ci_key, suites=("fractional_gpu",)))
    assert not v.ok and v.rollback
    assert "required suite 'fractional_gpu' ran on gpu-scheduling@0.0.9, not on gpu-scheduling@0.1.0" in v.summary()
    assert "fractional_gpu/" not in " ".join(v.results)  # what ran on OLD backs no claim about NEW
    with pytest.raises(errors.CheckFailed) as exc:
        promote.promote("gpu-scheduling", "0.1.0", "candidate", [rollback], lambda _p: DIGEST_A,
                        catalog_dir=catalog_dir, promoted_by="t@h")
    assert exc.value.exit_code == 1 and "ran on gpu-scheduling@0.0.9" in str(exc.value.findings)
    # the plain upgrade (it ends on NEW) proves NEW's suites and promotes
    upgraded = _upgrade_evidence(make_evidence, passing_suites, "upgrade")
    assert judge.judge(upgraded, _claim(ci_key, suites=("fractional_gpu",))).ok
    entry = promote.promote("gpu-scheduling", "0.1.0", "candidate", [upgraded], lambda _p: DIGEST_A,
                            catalog_dir=catalog_dir, promoted_by="t@h")
    assert entry["evidence"][0]["evidenceDigest"] == evidence.load(upgraded)[1]


def test_rollback_evidence_written_before_suites_said_where_they_ran_is_judged_by_its_mode(
    make_evidence: MakeEvidence, passing_suites: list[base.SuiteResult], ci_key: keys.GeneratedKey,
) -> None:
    """Evidence from before ``ranOn`` existed: after a rollback, its suites ran on the old version."""
    st = evidence.build_statement(bundle="gpu-scheduling", version="0.1.0", profile="sim", digest=DIGEST_A,
                                  cluster={}, tools={}, suites=passing_suites, started=time.time(),
                                  finished=time.time(), extra={"upgradeFrom": OLD, "upgrade": {"mode": "rollback"}})
    for s in st["predicate"]["suites"]:
        del s["ranOn"]
    out = make_evidence().parent / "legacy"
    evidence.write_evidence(out, st, ci_key.private_path)
    v = judge.judge(out, _claim(ci_key, suites=("fractional_gpu",)))
    assert "ran on gpu-scheduling@0.0.9" in v.summary()


def test_a_matrix_cell_is_not_green_from_a_subset_of_the_suites(tmp_path: Path, ci_key: keys.GeneratedKey) -> None:
    """Attack 4: evidence of ``--suite gang`` alone showed the cell as passed (promote refused it)."""
    st = evidence.build_statement(
        bundle="gpu-queueing", version="0.1.0", profile="sim", digest=DIGEST_A,
        cluster={"kubernetesVersion": "v1.36.3"}, tools={}, started=time.time(), finished=time.time(),
        suites=[{"name": "gang", "cases": [{"name": "all-or-nothing", "result": "passed"}]}])
    folder = tmp_path / "m" / "cells" / "gpu-queueing" / "0.1.0" / "1.36"
    evidence.write_evidence(folder, st, ci_key.private_path)
    pub = keys.load_public(ci_key.public_path)
    target = matrix.Target("gpu-queueing", "0.1.0", DIGEST_A, (), ("quota_reclaim", "gang"))
    cell = matrix.read_cell(folder, tmp_path / "m", target, "v1.36.3", {keys.keyid(pub): pub})
    assert cell is not None and cell.status == "incomplete"
    assert cell.detail.endswith("required suite 'quota_reclaim' was not run")
    # the same evidence with every suite of the bundle is green
    full = matrix.Target("gpu-queueing", "0.1.0", DIGEST_A, (), ("gang",))
    again = matrix.read_cell(folder, tmp_path / "m", full, "v1.36.3", {keys.keyid(pub): pub})
    assert again is not None and again.status == "passed"


def test_user_supplied_binaries_as_the_channel_policy_says(
    catalog_dir: Path, make_evidence: MakeEvidence, ci_key: keys.GeneratedKey,
) -> None:
    """``userSuppliedBinaries: forbid|require`` per channel; the entry lists what the user brought."""
    kai = {"image": "ghcr.io/kai-scheduler/kai-scheduler/scheduler", "executable": "/opt/kai/scheduler",
           "sha256": "ab" * 32, "version": "v0.16.8", "live": True, "userSupplied": True}
    mapped = make_evidence(extra=None, kubernetes=None)
    st = json.loads((mapped / evidence.STATEMENT).read_text())
    st["predicate"]["cluster"]["images"] = [kai]
    evidence.write_evidence(mapped, st, ci_key.private_path)
    assert judge.judge(mapped, _claim(ci_key)).user_supplied == [
        {k: kai[k] for k in ("image", "executable", "sha256", "version")}]
    assert "ran binaries a user supplied" in judge.judge(mapped, _claim(ci_key, user_supplied="forbid")).summary()
    assert "requires the user's own" in judge.judge(make_evidence(), _claim(ci_key, user_supplied="require")).summary()
    pol = catalog_dir / "channels" / "policy.yaml"
    pol.write_text(pol.read_text().replace("requireBundleSuites: true\n", "requireBundleSuites: true\n"
                                           "    userSuppliedBinaries: forbid\n", 1))
    assert policy.load(pol).channel("candidate").user_supplied_binaries == "forbid"
    with pytest.raises(errors.CheckFailed, match="cannot be promoted"):
        promote.promote("gpu-scheduling", "0.1.0", "candidate", [mapped], lambda _p: DIGEST_A,
                        catalog_dir=catalog_dir, promoted_by="t@h")
    pol.write_text(pol.read_text().replace("userSuppliedBinaries: forbid", "userSuppliedBinaries: allow"))
    entry = promote.promote("gpu-scheduling", "0.1.0", "candidate", [mapped], lambda _p: DIGEST_A,
                            catalog_dir=catalog_dir, promoted_by="t@h")
    assert entry["evidence"][0]["userSupplied"][0]["image"] == kai["image"]


# --- attack 9: malformed evidence is refused with reasons, never a traceback ---


def _envelope(payload: bytes, sigs: Any) -> dict[str, Any]:
    return {"payloadType": evidence.PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(), "signatures": sigs}


def _signed(statement: Any, ci_key: keys.GeneratedKey) -> dict[str, Any]:
    payload = json.dumps(statement).encode()
    env = evidence.sign_statement({}, keys.load_private(ci_key.private_path))
    env["payload"] = base64.b64encode(payload).decode()
    from gpucatalog.pipelines import dsse
    sig = keys.load_private(ci_key.private_path).sign(dsse.pae(evidence.PAYLOAD_TYPE, payload))
    env["signatures"] = [{"keyid": ci_key.keyid, "sig": base64.b64encode(sig).decode()}]
    return env


def _good_statement() -> dict[str, Any]:
    return evidence.build_statement(bundle="gpu-scheduling", version="0.1.0", profile="sim", digest=DIGEST_A,
                                    cluster={}, tools={}, suites=[], started=0.0, finished=0.0)


MALFORMED: dict[str, Callable[[keys.GeneratedKey], Any]] = {
    "keyid-a-list": lambda k: _envelope(b"{}", [{"keyid": ["a", "b"], "sig": "AAAA"}]),
    "keyid-a-number": lambda k: _envelope(b"{}", [{"keyid": 12345, "sig": "AAAA"}]),
    "signatures-not-a-list": lambda k: _envelope(b"{}", {"keyid": "x"}),
    "deep-nesting": lambda k: json.loads('{"a":' * 50 + "1" + "}" * 50) | {"payload": "[" * 100_000},
    "suites-a-string": lambda k: _signed(_good_statement() | {"predicate": {
        **_good_statement()["predicate"], "suites": "all of them"}}, k),
    "cases-a-dict": lambda k: _signed(_good_statement() | {"predicate": {
        **_good_statement()["predicate"], "suites": [{"name": "gang", "cases": {"a": "passed"}}]}}, k),
    "case-result-a-number": lambda k: _signed(_good_statement() | {"predicate": {
        **_good_statement()["predicate"], "suites": [{"name": "gang", "cases": [{"name": 1, "result": 2}]}]}}, k),
    "subject-name-a-list": lambda k: _signed(_good_statement() | {"subject": [{"name": ["x"], "digest": {
        "sha256": "a1" * 32}}]}, k),
    "cluster-images-strings": lambda k: _signed(_good_statement() | {"predicate": {
        **_good_statement()["predicate"], "cluster": {"images": ["x"]}}}, k),
    "payload-deeply-nested": lambda k: _signed([[[[]]]], k) | {
        "payload": base64.b64encode(b"[" * 100_000 + b"]" * 100_000).decode()},
}


@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_malformed_evidence_is_a_reason_never_a_crash(shape: str, tmp_path: Path, ci_key: keys.GeneratedKey) -> None:
    path = tmp_path / "evidence.dsse.json"
    path.write_text(json.dumps(MALFORMED[shape](ci_key)))
    v = judge.judge(path, _claim(ci_key))
    assert not v.ok and v.reasons, shape


@pytest.mark.parametrize("shape", ["keyid-a-list", "cases-a-dict", "payload-deeply-nested"])
def test_malformed_evidence_exits_cleanly_from_every_reader(
    shape: str, tmp_path: Path, catalog_dir: Path, ci_key: keys.GeneratedKey, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: promote, conformance-report and matrix --no-run ended in tracebacks (a TypeError
    for a list keyid, an AttributeError for cases of the wrong type, a RecursionError for deep
    nesting); now promote exits 1 naming the reason, and the other readers set the file aside."""
    ev = tmp_path / "m" / "cells" / "gpu-scheduling" / "0.1.0" / "1.36"
    ev.mkdir(parents=True)
    (ev / evidence.ENVELOPE).write_text(json.dumps(MALFORMED[shape](ci_key)))
    monkeypatch.setattr(promote_cli, "fresh_render", lambda _c, _b, _v: ((lambda _p: DIGEST_A), ("fractional_gpu",)))
    code = cli.main(["--catalog-dir", str(catalog_dir), "promote", "gpu-scheduling@0.1.0", "--to", "candidate",
                     "--evidence", str(ev)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "unmet requirement" in err, err
    pub = keys.load_public(ci_key.public_path)
    trusted = {keys.keyid(pub): pub}
    cell = matrix.read_cell(ev, tmp_path / "m", matrix.Target("gpu-scheduling", "0.1.0", DIGEST_A, ()), "v1.36.3",
                            trusted)
    assert cell is not None and cell.status == "unverified"
    found, rejected = ai_conformance.read_evidence([ev], bundle="gpu-scheduling", version="0.1.0", minor="1.36",
                                                   trusted=trusted, fresh_digest=lambda _p: DIGEST_A)
    assert found == [] and len(rejected) == 1
