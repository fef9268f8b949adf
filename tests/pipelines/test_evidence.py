from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from gpucatalog.core import errors
from gpucatalog.pipelines import dsse, evidence, keys
from gpucatalog.validators.conformance.kit import base

MakeEvidence = Callable[..., Path]
DIGEST_A = "sha256:" + "a1" * 32  # the default digest of make_evidence (tests.plugins.pipelines)


def test_pae_matches_the_dsse_spec_example() -> None:
    # The DSSE protocol document's worked example.
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world")


def test_write_evidence_produces_signed_statement_junit_and_report(
    make_evidence: MakeEvidence, ci_key: keys.GeneratedKey, suites: list[base.SuiteResult]
) -> None:
    out = make_evidence(suites=suites)
    env = json.loads((out / evidence.ENVELOPE).read_text())
    assert env["payloadType"] == "application/vnd.in-toto+json"
    assert env["signatures"][0]["keyid"] == ci_key.keyid
    st = evidence.verify(env, {ci_key.keyid: keys.load_public(ci_key.public_path)})
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["subject"] == [{"name": "gpu-scheduling@0.1.0", "digest": {"sha256": DIGEST_A.split(":")[1]}}]
    pred = st["predicate"]
    assert pred["result"] == "failed"  # the sample has a failing case: evidence still written, marked failed
    assert [s["name"] for s in pred["suites"]] == [s.name for s in suites]
    assert pred["cluster"]["simulated"] and pred["cluster"]["live"]
    assert json.loads((out / evidence.STATEMENT).read_text()) == st
    assert (out / evidence.JUNIT).is_file() and (out / evidence.REPORT).is_file()


def _envelope(out: Path) -> dict[str, object]:
    env: dict[str, object] = json.loads((out / evidence.ENVELOPE).read_text())
    return env


def test_tampered_payload_fails_verification(make_evidence: MakeEvidence, ci_key: keys.GeneratedKey) -> None:
    env = _envelope(make_evidence())
    st = json.loads(base64.b64decode(str(env["payload"])))
    st["predicate"]["result"] = "passed"
    st["subject"][0]["digest"]["sha256"] = "c" * 64
    env["payload"] = base64.b64encode(json.dumps(st).encode()).decode()
    with pytest.raises(errors.CheckFailed) as exc:
        evidence.verify(env, {ci_key.keyid: keys.load_public(ci_key.public_path)})
    assert "bad signature" in str(exc.value.findings[0])


def test_swapped_payload_type_fails(make_evidence: MakeEvidence, ci_key: keys.GeneratedKey) -> None:
    env = _envelope(make_evidence())
    env["payloadType"] = "text/plain"
    with pytest.raises(errors.CheckFailed, match="malformed"):
        evidence.verify(env, {ci_key.keyid: keys.load_public(ci_key.public_path)})


def test_untrusted_key_is_rejected_even_with_a_valid_signature(
    make_evidence: MakeEvidence, ci_key: keys.GeneratedKey, rogue_key: keys.GeneratedKey
) -> None:
    env = _envelope(make_evidence(key=rogue_key.private_path))
    with pytest.raises(errors.CheckFailed) as exc:
        evidence.verify(env, {ci_key.keyid: keys.load_public(ci_key.public_path)})
    assert "untrusted key" in str(exc.value.findings[0])


def test_forged_keyid_hint_does_not_help_an_untrusted_signer(
    make_evidence: MakeEvidence, ci_key: keys.GeneratedKey, rogue_key: keys.GeneratedKey
) -> None:
    env = _envelope(make_evidence(key=rogue_key.private_path))
    env["signatures"][0]["keyid"] = ci_key.keyid  # type: ignore[index]
    with pytest.raises(errors.CheckFailed) as exc:
        evidence.verify(env, {ci_key.keyid: keys.load_public(ci_key.public_path)})
    assert "bad signature" in str(exc.value.findings[0])


def test_write_evidence_checks_key_permissions_before_writing(
    tmp_path: Path, ci_key: keys.GeneratedKey, passing_suites: list[base.SuiteResult]
) -> None:
    ci_key.private_path.chmod(0o644)
    with pytest.raises(errors.InputError, match="too open"):
        statement = evidence.build_statement(
            bundle="b", version="1.0.0", profile="sim", digest=DIGEST_A, cluster={"provider": "sim"},
            tools={}, suites=passing_suites, started=0.0, finished=1.0,
        )
        evidence.write_evidence(tmp_path / "ev", statement, ci_key.private_path)
    assert not (tmp_path / "ev").exists()


def test_suite_summary_contradicting_cases_is_recomputed() -> None:
    lying = {"name": "gang", "result": "passed", "cases": [{"name": "c", "result": "failed"}]}
    st = evidence.build_statement(bundle="b", version="1", profile="sim", digest=DIGEST_A, cluster={}, tools={},
                                  suites=[lying], started=0.0, finished=1.0)
    assert st["predicate"]["suites"][0]["result"] == "failed"
    assert st["predicate"]["result"] == "failed"
