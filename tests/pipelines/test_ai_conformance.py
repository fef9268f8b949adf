"""The AI conformance self-assessment: the mapping is validated against the suites' real case
names, a requirement is claimed only from passing, signed evidence of this bundle on the mapping's
minor, "not covered" is said where no case proves it, and the files are signed. Evidence here is
real signed evidence with small suite results; no cluster, no Helm."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.catalog import loader, model
from gpucatalog.pipelines import ai_conformance, ai_conformance_files, dsse, evidence, keys

DIGEST = "sha256:" + "e5" * 32
MAPPING = Path(__file__).resolve().parents[2] / "catalog" / "conformance" / "ai-v1.36.yaml"
QUEUEING = {
    "gang": ["preflight", "gang_with_room_starts_together", "gang_short_of_one_gpu_starts_none_then_all",
             "job_with_batch_min_member"],
    "quota_reclaim": ["preflight", "reclaim_borrowed_gpus", "non_preemptible_stays_within_quota",
                      "over_quota_weights_split_spare_gpus", "hierarchical_reclaim_across_departments"],
    "fault_remediation": ["agents_report_conditions", "busy_narrowed_pcie_link_quarantined"],
    "accelerator_metrics": ["per_gpu_series"],
}
DRA = ["preflight", "two_halves_share_one_gpu", "partitions_fill_gpu_exactly", "mixed_claims_within_capacity",
       "oversized_claim_never_schedules"]


@pytest.fixture(scope="module")
def cat() -> model.Catalog:
    return loader.load_catalog()


@pytest.fixture
def key(tmp_path: Path) -> keys.GeneratedKey:
    return keys.generate(tmp_path / "keys", "ci")


def _trusted(k: keys.GeneratedKey) -> dict[str, Any]:
    pub = keys.load_public(k.public_path)
    return {keys.keyid(pub): pub}


def _evidence(out: Path, key: Path, *, kubernetes: str = "v1.36.3", failed: str = "", bundle: str = "gpu-queueing",
              exploratory: bool = False, digest: str = DIGEST, without: str = "", dra: bool = False) -> Path:
    """Signed evidence of QUEUEING's suites; ``dra`` adds gpu_sharing_dra (what 0.2.0 and later run)."""
    run = {**QUEUEING, **({"gpu_sharing_dra": DRA} if dra else {})}
    suites = [{"name": s, "cases": [{"name": c, "result": "failed" if f"{s}/{c}" == failed else "passed",
                                     "reason": "x" if f"{s}/{c}" == failed else ""} for c in cases]}
              for s, cases in run.items() if s != without]
    st = evidence.build_statement(bundle=bundle, version="0.1.0", profile="sim", digest=digest,
                                  cluster={"provider": "sim", "kubernetesVersion": kubernetes}, tools={},
                                  suites=suites, started=time.time() - 1, finished=time.time(), exploratory=exploratory)
    evidence.write_evidence(out, st, key)
    return out


def _read(paths: list[Path], k: keys.GeneratedKey) -> tuple[list[ai_conformance.Evidence], list[str]]:
    return ai_conformance.read_evidence(paths, bundle="gpu-queueing", version="0.1.0", minor="1.36",
                                        trusted=_trusted(k), fresh_digest=lambda _p: DIGEST)


def test_the_shipped_mapping_names_only_real_cases(cat: model.Catalog) -> None:
    m = ai_conformance.load(MAPPING)
    assert ai_conformance.validate(m, cat) == []
    assert m.kubernetes == "1.36" and len(m.requirements) == 14
    assert sum(r.level == "MUST" for r in m.requirements) == 8
    assert {"gang_scheduling", "accelerator_metrics", "secure_accelerator_access", "robust_controller",
            "gpu_sharing"} <= {r.id for r in m.requirements}


def test_a_mapping_naming_a_case_that_does_not_exist_is_caught(cat: model.Catalog, tmp_path: Path) -> None:
    doc = yaml.safe_load(MAPPING.read_text())
    gang = next(r for r in doc["requirements"] if r["id"] == "gang_scheduling")
    gang["proofs"]["gpu-queueing"]["cases"].append("gang/all_pods_start_eventually")
    gang["proofs"]["slurm"] = {"cases": ["gang/gang_with_room_starts_together"]}  # slurm runs no gang suite
    gang["proofs"]["no-such-bundle"] = {"cases": ["gang/preflight"]}
    path = tmp_path / "ai-v1.36.yaml"
    path.write_text(yaml.safe_dump(doc))
    found = {(f.rule, f.message) for f in ai_conformance.validate(ai_conformance.load(path), cat)}
    assert ("unknown-case", "'gang/all_pods_start_eventually' is not a case any suite runs") in found
    assert any(rule == "suite-not-run" and "slurm does not declare suite 'gang'" in msg for rule, msg in found)
    assert any(rule == "unknown-bundle" for rule, _m in found)
    assert len(found) == 3


def test_the_cli_refuses_a_bad_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpucatalog.cli import main
    root = tmp_path / "catalog"
    shutil.copytree(MAPPING.parents[1], root)
    bad = root / "conformance" / "ai-v1.36.yaml"
    bad.write_text(bad.read_text().replace("gang/job_with_batch_min_member]", "gang/no_such_case]", 1))
    assert main(["--catalog-dir", str(root), "conformance-report", "gpu-queueing", "--validate"]) == 2
    assert "'gang/no_such_case' is not a case any suite runs" in capsys.readouterr().err
    assert main(["--catalog-dir", str(root), "conformance-report", "gpu-queueing", "--kubernetes", "1.30",
                 "--validate"]) == 2
    assert "no AI conformance mapping for Kubernetes 1.30" in capsys.readouterr().err


def test_claims_come_only_from_passing_signed_cases(tmp_path: Path, key: keys.GeneratedKey) -> None:
    m = ai_conformance.load(MAPPING)
    found, rejected = _read([_evidence(tmp_path / "ev", key.private_path)], key)
    assert rejected == [] and len(found) == 1
    by = {a.requirement.id: a for a in ai_conformance.assess(m, "gpu-queueing", found)}
    assert by["gang_scheduling"].status == ai_conformance.IMPLEMENTED and by["gang_scheduling"].evidence
    assert set(by["gang_scheduling"].cases.values()) == {"passed"}
    assert by["robust_controller"].status == ai_conformance.IMPLEMENTED
    assert by["driver_runtime_management"].status == ai_conformance.PARTIAL  # scope: partial
    assert by["accelerator_metrics"].status == ai_conformance.IMPLEMENTED
    assert by["accelerator_metrics"].cases == {"accelerator_metrics/per_gpu_series": "passed"}
    for gap in ("ai_service_metrics", "secure_accelerator_access", "ai_inference"):
        assert by[gap].status == ai_conformance.NOT_IMPLEMENTED and not by[gap].covered
        assert by[gap].notes.startswith("not covered") and by[gap].evidence == []
    # covered by gpu_sharing_dra (gpu-queueing from 0.2.0), which this evidence did not run
    assert by["gpu_sharing"].covered and by["gpu_sharing"].status == ai_conformance.NOT_IMPLEMENTED
    assert by["gpu_sharing"].notes.startswith("not shown: no passing evidence for gpu_sharing_dra/")


def test_a_failed_or_missing_case_is_not_claimed(tmp_path: Path, key: keys.GeneratedKey) -> None:
    m = ai_conformance.load(MAPPING)
    bad = _evidence(tmp_path / "bad", key.private_path, failed="gang/gang_short_of_one_gpu_starts_none_then_all")
    good = _evidence(tmp_path / "good", key.private_path)
    found, _ = _read([good, bad], key)  # one pass does not outweigh a failure of the same case
    by = {a.requirement.id: a for a in ai_conformance.assess(m, "gpu-queueing", found)}
    assert by["gang_scheduling"].status == ai_conformance.NOT_IMPLEMENTED and by["gang_scheduling"].covered
    assert "failed: gang/gang_short_of_one_gpu_starts_none_then_all" in by["gang_scheduling"].notes
    by = {a.requirement.id: a for a in ai_conformance.assess(m, "gpu-queueing", [])}
    assert by["gang_scheduling"].status == ai_conformance.NOT_IMPLEMENTED
    assert by["gang_scheduling"].notes.startswith("not shown: no passing evidence for gang/")
    # evidence of a run without the metrics suite (gpu-queueing 0.1.0 declares none) claims no metrics
    older, _ = _read([_evidence(tmp_path / "older", key.private_path, without="accelerator_metrics")], key)
    by = {a.requirement.id: a for a in ai_conformance.assess(m, "gpu-queueing", older)}
    assert by["accelerator_metrics"].status == ai_conformance.NOT_IMPLEMENTED
    assert by["accelerator_metrics"].notes.startswith("not shown: no passing evidence for accelerator_metrics/")
    assert by["gang_scheduling"].status == ai_conformance.IMPLEMENTED
    failed, _ = _read([_evidence(tmp_path / "no-series", key.private_path,
                                 failed="accelerator_metrics/per_gpu_series")], key)
    by = {a.requirement.id: a for a in ai_conformance.assess(m, "gpu-queueing", failed)}
    assert by["accelerator_metrics"].status == ai_conformance.NOT_IMPLEMENTED
    assert "failed: accelerator_metrics/per_gpu_series" in by["accelerator_metrics"].notes


def test_evidence_that_cannot_back_a_claim_is_set_aside(tmp_path: Path, key: keys.GeneratedKey) -> None:
    rogue = keys.generate(tmp_path / "rogue", "rogue")
    paths = [
        _evidence(tmp_path / "rogue-ev", rogue.private_path),
        _evidence(tmp_path / "old-minor", key.private_path, kubernetes="v1.35.4"),
        _evidence(tmp_path / "probe", key.private_path, exploratory=True),
        _evidence(tmp_path / "other", key.private_path, bundle="slurm"),
        _evidence(tmp_path / "stale", key.private_path, digest="sha256:" + "0f" * 32),
    ]
    found, rejected = _read(paths, key)
    assert found == [] and len(rejected) == 5
    text = "\n".join(rejected)
    for why in ("no valid signature by a trusted key", "not 1.36", "exploratory", "not 'gpu-queueing@0.1.0'",
                "changed after certification"):
        assert why in text


def test_files_are_written_and_signed(tmp_path: Path, key: keys.GeneratedKey) -> None:
    m = ai_conformance.load(MAPPING)
    found, rejected = _read([_evidence(tmp_path / "ev", key.private_path)], key)
    results = ai_conformance.assess(m, "gpu-queueing", found)
    out = tmp_path / "report"
    env_path = ai_conformance_files.write(out, m, bundle="gpu-queueing", version="0.1.0", digest=DIGEST,
                                          results=results, found=found, rejected=rejected,
                                          signing_key=key.private_path)
    env = json.loads(env_path.read_text())
    payload, _signer = dsse.verify(env, _trusted(key), evidence.PAYLOAD_TYPE)
    st = json.loads(payload)
    assert st["subject"][0] == {"name": "gpu-queueing@0.1.0", "digest": {"sha256": "e5" * 32}}
    for rel, digest in st["predicate"]["files"].items():  # every file is the one signed
        assert digest == "sha256:" + hashlib.sha256((out / rel).read_bytes()).hexdigest()
    assert {"PRODUCT.yaml", "junit.xml", "self-assessment.md"} <= set(st["predicate"]["files"])
    product = yaml.safe_load((out / "PRODUCT.yaml").read_text())
    gang = next(r for r in product["spec"]["schedulingOrchestration"] if r["id"] == "gang_scheduling")
    assert gang["status"] == "Implemented" and gang["level"] == "MUST"
    assert (out / gang["evidence"][0]).is_file()  # points at the copied signed envelope
    metrics = next(r for r in product["spec"]["observability"] if r["id"] == "accelerator_metrics")
    assert metrics["status"] == "Implemented" and metrics["level"] == "MUST" and metrics["evidence"]
    service = next(r for r in product["spec"]["observability"] if r["id"] == "ai_service_metrics")
    assert service["status"] == "Not Implemented" and service["evidence"] == [] and "not covered" in service["notes"]
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    # one failure: GPU sharing is covered (gpu_sharing_dra) but this evidence (0.1.0's suites) has none of its cases
    assert suite is not None and suite.get("tests") == "14" and suite.get("failures") == "1"
    assert [tc.get("name") for tc in suite.iter("testcase") if tc.find("failure") is not None] == ["gpu_sharing"]
    assert suite.get("skipped") == str(sum(1 for a in results if not a.covered))


def test_the_report_key_vouches_for_no_evidence(tmp_path: Path, key: keys.GeneratedKey,
                                                capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 attack 5: ``--signing-key K`` made K trusted, so evidence signed by a key that
    catalog/trust.yaml does not name backed MUST claims (exit 0) and nothing said so. Now the
    evidence is set aside, the output says why (exit 1: MUST claims not shown), and trusting
    the key in the catalog's own trust file is what makes it count."""
    from gpucatalog.cli import main
    from gpucatalog.pipelines import trust
    root = tmp_path / "catalog"
    shutil.copytree(MAPPING.parents[1], root)
    monkeypatch.setattr("gpucatalog.catalog.render.render_bundle", lambda *_a, **_k: type("R", (), {"digest": DIGEST}))
    ev = _evidence(tmp_path / "ev", key.private_path, dra=True)  # every covered requirement shown once trusted
    args = ["--catalog-dir", str(root), "conformance-report", "gpu-queueing@0.1.0", "--evidence", str(ev),
            "--signing-key", str(key.private_path)]
    assert main([*args, "--out", str(tmp_path / "out1")]) == 1
    err = capsys.readouterr().err
    assert f"not used: {ev}: no valid signature by a trusted key" in err and "catalog keys trust" in err
    text = (tmp_path / "out1" / ai_conformance_files.MARKDOWN).read_text()
    assert "| MUST | Implemented |" not in text and "`gang/gang_with_room_starts_together` missing" in text
    assert "Evidence given but not used" in text  # the report itself says so
    trust.add_key(root / "trust.yaml", "ci", keys.load_public(key.public_path), ["stable"])
    assert main([*args, "--out", str(tmp_path / "out2")]) == 0
    assert "not used" not in capsys.readouterr().err
    assert "| MUST | Implemented |" in (tmp_path / "out2" / ai_conformance_files.MARKDOWN).read_text()
