"""The repository is the trust root, and skipped is not passed (issue 14, attacks 1, 2, 5, 9):
promote judges only by the catalog's own policy and trust file, records their digests, and
refuses a suite with a case not run, whatever its signed summary says."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.cli import main
from gpucatalog.cli import promote as promote_cli
from gpucatalog.pipelines import channels, dsse, evidence, keys, trust

DIGEST_A = "sha256:" + "a1" * 32
MakeEvidence = Callable[..., Path]


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bundle renders to DIGEST_A and declares fractional_gpu (no helm needed here)."""
    monkeypatch.setattr(promote_cli, "fresh_render", lambda _c, _b, _v: ((lambda _p: DIGEST_A), ("fractional_gpu",)))


def _files(catalog_dir: Path) -> dict[str, bytes]:
    return {p.relative_to(catalog_dir).as_posix(): p.read_bytes() for p in sorted(catalog_dir.rglob("*")) if p.is_file()}


def _promote(catalog_dir: Path, *args: str) -> int:
    return main(["--catalog-dir", str(catalog_dir), "promote", "gpu-scheduling@0.1.0", *args])


def test_foreign_trust_file_cannot_promote(catalog_dir: Path, make_evidence: MakeEvidence, rogue_key: keys.GeneratedKey,
                                           tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    evil = tmp_path / "evil-trust.yaml"
    trust.add_key(evil, "evil", keys.load_public(rogue_key.public_path), ["candidate", "stable"])
    ev = make_evidence(key=rogue_key.private_path)
    before = _files(catalog_dir)
    assert _promote(catalog_dir, "--to", "candidate", "--evidence", str(ev), "--trust-file", str(evil)) == 2
    assert "allowed only with --dry-run" in capsys.readouterr().err
    # a dry run may ask "what would this trust file say", and writes nothing
    assert _promote(catalog_dir, "--to", "candidate", "--evidence", str(ev), "--trust-file", str(evil), "--dry-run") == 0
    assert "nothing written" in capsys.readouterr().out
    # without the flag, the catalog's own trust file refuses the rogue signature
    assert _promote(catalog_dir, "--to", "candidate", "--evidence", str(ev)) == 1
    assert "untrusted key" in capsys.readouterr().err
    assert _files(catalog_dir) == before


def test_foreign_policy_cannot_promote(catalog_dir: Path, make_evidence: MakeEvidence, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    lax = tmp_path / "lax.yaml"
    lax.write_text("apiVersion: gpu-catalog.dev/v1alpha1\nkind: PromotionPolicy\nchannels:\n  stable: {requiredProfiles: [sim]}\n")
    ev = make_evidence()
    before = _files(catalog_dir)
    assert _promote(catalog_dir, "--to", "stable", "--evidence", str(ev), "--policy", str(lax)) == 2
    assert _promote(catalog_dir, "--to", "stable", "--evidence", str(ev)) == 1
    assert "is not in 'candidate'" in capsys.readouterr().err
    assert _files(catalog_dir) == before


@pytest.mark.parametrize("which", ["trust.yaml", "channels/policy.yaml"])
def test_trust_root_symlinked_out_of_the_catalog_is_refused(catalog_dir: Path, make_evidence: MakeEvidence,
                                                            tmp_path: Path, which: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    f = catalog_dir / which
    outside = tmp_path / ("outside-" + f.name)
    outside.write_bytes(f.read_bytes())
    f.unlink()
    f.symlink_to(outside)
    assert _promote(catalog_dir, "--to", "candidate", "--evidence", str(make_evidence())) == 2
    assert "outside the catalog folder" in capsys.readouterr().err


def test_entry_records_policy_and_trust_digests_and_keeps_evidence(catalog_dir: Path, make_evidence: MakeEvidence) -> None:
    ev = make_evidence()
    assert _promote(catalog_dir, "--to", "candidate", "--evidence", str(ev)) == 0
    entry = channels.load(catalog_dir / "channels", "candidate").entries[0]
    sha = lambda p: "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    assert entry["policyDigest"] == sha(catalog_dir / "channels" / "policy.yaml")
    assert entry["trustDigest"] == sha(catalog_dir / "trust.yaml")
    stored = channels.stored_evidence(catalog_dir / "channels", entry["evidenceDigest"])
    assert stored.read_bytes() == (ev / evidence.ENVELOPE).read_bytes()


def _old_style_evidence(path: Path, key: Path, cases: list[dict[str, Any]]) -> Path:
    """Evidence as the code before issue 14 wrote it: a suite with unrun cases summarised as passed."""
    statement = {
        "_type": evidence.STATEMENT_TYPE, "predicateType": evidence.PREDICATE_TYPE,
        "subject": [{"name": "gpu-scheduling@0.1.0", "digest": {"sha256": DIGEST_A[7:]}}],
        "predicate": {"bundle": "gpu-scheduling", "version": "0.1.0", "profile": "sim", "cluster": {}, "tools": {},
                      "started": "", "finished": "", "result": "passed",
                      "suites": [{"name": "fractional_gpu", "result": "passed", "seconds": 1, "started": 0, "cases": cases}]},
    }
    path.mkdir()
    env = dsse.sign(json.dumps(statement).encode(), evidence.PAYLOAD_TYPE, keys.load_private(key))
    (path / evidence.ENVELOPE).write_text(json.dumps(env))
    return path


def test_suite_with_cases_not_run_never_promotes(catalog_dir: Path, ci_key: keys.GeneratedKey, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cases = [{"name": "runs", "result": "passed"}, {"name": "drain-on-fault", "result": "skipped", "reason": "no faults"}]
    ev = _old_style_evidence(tmp_path / "old", ci_key.private_path, cases)
    before = _files(catalog_dir)
    assert _promote(catalog_dir, "--to", "candidate", "--evidence", str(ev)) == 1
    err = capsys.readouterr().err
    assert "required suite 'fractional_gpu' is incomplete: case(s) not run: drain-on-fault" in err
    assert _files(catalog_dir) == before


def test_certify_writes_incomplete_for_a_case_not_run(tmp_path: Path, ci_key: keys.GeneratedKey) -> None:
    from gpucatalog.validators.conformance.kit import base

    def not_run(_c: base.SuiteContext, _r: base.CaseResult) -> None:
        raise base.CaseNotRun("this cluster offers no fault injection")

    suite = base.run_cases("slurm", base.SuiteContext(kubeconfig=tmp_path), [
        ("ok", lambda _c, _r: None), ("drain-on-fault", not_run)])
    assert suite.result == "incomplete" and suite.cases[1].reason.startswith("not run: ")
    st = evidence.build_statement(bundle="slurm", version="0.1.0", profile="sim", digest=DIGEST_A, cluster={},
                                  tools={}, suites=[suite], started=time.time(), finished=time.time())
    assert st["predicate"]["result"] == "incomplete" and st["predicate"]["suites"][0]["result"] == "incomplete"
    paths = evidence.write_evidence(tmp_path / "ev", st, ci_key.private_path)
    junit = paths.junit.read_text()
    assert 'errors="1"' in junit and 'type="not-run"' in junit and "<skipped" not in junit
    assert 'name="result" value="incomplete"' in junit
    report = paths.report.read_text()
    assert 'class="verdict incomplete"' in report and "not run" in report


def test_evidence_dev_zero_is_exit_2_fast(catalog_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    t0 = time.monotonic()
    assert _promote(catalog_dir, "--to", "candidate", "--evidence", "/dev/zero") == 2
    assert "evidence is not a regular file" in capsys.readouterr().err and time.monotonic() - t0 < 5


def test_certify_evidence_path_that_is_a_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ev").write_text("")
    assert main(["certify", "gpu-scheduling", "--cluster", "sim", "--evidence", str(tmp_path / "ev")]) == 2
    assert "evidence path exists and is not a folder" in capsys.readouterr().err


def test_duplicate_entries_key_is_refused_and_nothing_lost(catalog_dir: Path, make_evidence: MakeEvidence,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert _promote(catalog_dir, "--to", "candidate", "--evidence", str(make_evidence())) == 0
    ch = catalog_dir / "channels" / "candidate.yaml"
    ch.write_text(ch.read_text() + "entries: []\n")
    before = _files(catalog_dir)
    ev = make_evidence(version="0.2.0")
    assert main(["--catalog-dir", str(catalog_dir), "promote", "gpu-scheduling@0.2.0", "--to", "candidate",
                 "--evidence", str(ev)]) == 2
    assert "duplicate key 'entries'" in capsys.readouterr().err
    assert _files(catalog_dir) == before
