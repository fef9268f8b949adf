"""The AI conformance lists of Kubernetes 1.35 and 1.37 (issue 28, item 4): each mapping validates,
a report for a minor uses that minor's list (1.35: DRA support a MUST of its own; 1.37: workload
sandboxing added), and from 1.37 PRODUCT.yaml links each covered requirement to its JUnit case."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.cli import main
from gpucatalog.pipelines import ai_conformance, ai_conformance_files, evidence, keys

DIGEST = "sha256:" + "e5" * 32
CONFORMANCE = Path(__file__).resolve().parents[2] / "catalog" / "conformance"
SUITES = {
    "gang": ["preflight", "gang_with_room_starts_together", "gang_short_of_one_gpu_starts_none_then_all",
             "job_with_batch_min_member"],
    "quota_reclaim": ["preflight", "reclaim_borrowed_gpus", "hierarchical_reclaim_across_departments"],
    "gpu_sharing_dra": ["preflight", "two_halves_share_one_gpu", "oversized_claim_never_schedules",
                        "partitions_fill_gpu_exactly", "mixed_claims_within_capacity", "bad_claims_named"],
}


@pytest.mark.parametrize("minor", ["1.35", "1.36", "1.37"])
def test_each_mapping_validates(minor: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance-report", "gpu-queueing@0.2.0", "--kubernetes", minor, "--validate"]) == 0
    assert f"ai-v{minor}.yaml" in capsys.readouterr().err


def _evidence(out: Path, key: keys.GeneratedKey, kubernetes: str, failed: tuple[str, ...] = ()) -> Path:
    suites = [{"name": s, "cases": [{"name": c, "result": "failed" if f"{s}/{c}" in failed else "passed",
                                     "reason": "x" if f"{s}/{c}" in failed else ""} for c in cases]}
              for s, cases in SUITES.items()]
    st = evidence.build_statement(bundle="gpu-queueing", version="0.2.0", profile="sim", digest=DIGEST,
                                  cluster={"provider": "sim", "kubernetesVersion": kubernetes}, tools={},
                                  suites=suites, started=time.time() - 1, finished=time.time())
    evidence.write_evidence(out, st, key.private_path)
    return out


def _assess(minor: str, ev: Path, key: keys.GeneratedKey) -> tuple[ai_conformance.ConformanceMapping,
                                                                      list[ai_conformance.Evidence],
                                                                      list[ai_conformance.Assessment]]:
    m = ai_conformance.load(CONFORMANCE / f"ai-v{minor}.yaml")
    pub = keys.load_public(key.public_path)
    trusted: dict[str, Any] = {keys.keyid(pub): pub}
    found, rejected = ai_conformance.read_evidence([ev], bundle="gpu-queueing", version="0.2.0", minor=minor,
                                                   trusted=trusted, fresh_digest=lambda _p: DIGEST)
    assert rejected == [] and len(found) == 1
    return m, found, ai_conformance.assess(m, "gpu-queueing", found)


def test_a_1_35_report_uses_the_1_35_list(tmp_path: Path) -> None:
    key = keys.generate(tmp_path / "keys", "ci")
    # as on a real 1.35 cluster: shares and partitions need DRA features off by default before 1.36
    ev = _evidence(tmp_path / "ev", key, "v1.35.4", failed=("gpu_sharing_dra/two_halves_share_one_gpu",
                                                            "gpu_sharing_dra/partitions_fill_gpu_exactly"))
    m, _found, results = _assess("1.35", ev, key)
    by = {a.requirement.id: a for a in results}
    assert m.kubernetes == "1.35" and len(by) == 12
    assert by["dra_support"].requirement.level == "MUST" and by["dra_support"].covered
    assert by["dra_support"].status == ai_conformance.NOT_IMPLEMENTED
    assert "failed: gpu_sharing_dra/two_halves_share_one_gpu" in by["dra_support"].notes
    assert by["gang_scheduling"].status == ai_conformance.IMPLEMENTED
    assert not {"advanced_inference_ingress", "workload_sandboxing"} & set(by)


def test_a_1_36_report_claims_gpu_sharing_from_the_dra_cases(tmp_path: Path) -> None:
    """On 1.36 consumable capacity and partitionable devices are on by default: passing DRA shares
    and partitions prove GPU sharing; one failed case of them does not."""
    key = keys.generate(tmp_path / "keys", "ci")
    _m, _found, results = _assess("1.36", _evidence(tmp_path / "ok", key, "v1.36.3"), key)
    sharing = next(a for a in results if a.requirement.id == "gpu_sharing")
    assert sharing.status == ai_conformance.IMPLEMENTED and sharing.evidence
    assert set(sharing.cases) == {"gpu_sharing_dra/two_halves_share_one_gpu", "gpu_sharing_dra/partitions_fill_gpu_exactly",
                                  "gpu_sharing_dra/mixed_claims_within_capacity",
                                  "gpu_sharing_dra/oversized_claim_never_schedules"}
    bad = _evidence(tmp_path / "bad", key, "v1.36.3", failed=("gpu_sharing_dra/mixed_claims_within_capacity",))
    sharing = next(a for a in _assess("1.36", bad, key)[2] if a.requirement.id == "gpu_sharing")
    assert sharing.status == ai_conformance.NOT_IMPLEMENTED and sharing.covered
    assert "failed: gpu_sharing_dra/mixed_claims_within_capacity" in sharing.notes


def test_a_1_37_report_uses_the_1_37_list_and_links_junit_cases(tmp_path: Path) -> None:
    key = keys.generate(tmp_path / "keys", "ci")
    m, found, results = _assess("1.37", _evidence(tmp_path / "ev", key, "v1.37.2"), key)
    by = {a.requirement.id: a for a in results}
    assert m.kubernetes == "1.37" and len(by) == 15 and "dra_support" not in by
    assert by["workload_sandboxing"].requirement.level == "SHOULD" and not by["workload_sandboxing"].covered
    assert by["gpu_sharing"].status == ai_conformance.IMPLEMENTED  # DRA shares pass on 1.37's defaults
    out = tmp_path / "report"
    ai_conformance_files.write(out, m, bundle="gpu-queueing", version="0.2.0", digest=DIGEST, results=results,
                               found=found, rejected=[], signing_key=key.private_path)
    product = yaml.safe_load((out / "PRODUCT.yaml").read_text())
    assert product["metadata"]["kubernetesVersion"] == "v1.37"
    gang = next(r for r in product["spec"]["schedulingOrchestration"] if r["id"] == "gang_scheduling")
    assert gang["evidence"][0] == "file://junit.xml#gang_scheduling"
    assert (out / gang["evidence"][1]).is_file()  # and the signed envelope
    sandbox = next(r for r in product["spec"]["security"] if r["id"] == "workload_sandboxing")
    assert sandbox["evidence"] == []
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "15"
    assert {tc.get("name") for tc in suite.iter("testcase")} >= {"gang_scheduling", "workload_sandboxing"}


def test_before_1_37_evidence_is_the_signed_envelopes_only(tmp_path: Path) -> None:
    key = keys.generate(tmp_path / "keys", "ci")
    m, found, results = _assess("1.36", _evidence(tmp_path / "ev", key, "v1.36.3"), key)
    out = tmp_path / "report"
    ai_conformance_files.write(out, m, bundle="gpu-queueing", version="0.2.0", digest=DIGEST, results=results,
                               found=found, rejected=[], signing_key=key.private_path)
    product = yaml.safe_load((out / "PRODUCT.yaml").read_text())
    links = [e for items in product["spec"].values() for r in items for e in r["evidence"]]
    assert links and not any(e.startswith("file://") for e in links)
