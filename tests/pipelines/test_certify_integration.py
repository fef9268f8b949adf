"""`catalog certify` end to end on the sim cluster, then the promotion gate on its evidence.

Real parts: helm renders and installs, the API server and controllers run, gpu-health's agent and
controller run as processes, faults are read by the real parsers, evidence is signed with Ed25519.
Each test owns its cluster: `catalog certify` starts and stops it, and that is part of what is tested.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpucatalog.cli import main
from gpucatalog.pipelines import evidence, keys

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def test_certify_fault_remediation_then_promote(
    tmp_path: Path, repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = keys.generate(tmp_path / "keys", "ci")
    ev = tmp_path / "evidence"
    cat = ["--catalog-dir", str(repo_copy)]
    rc = main([
        *cat, "certify", "gpu-scheduling@0.1.0", "--cluster", "sim", "--suite", "fault_remediation",
        "--cluster-name", f"cert-{os.getpid()}", "--signing-key", str(key.private_path),
        "--evidence", str(ev), "--json",
    ])
    out = json.loads(capsys.readouterr().out)
    assert {"bundle", "version", "digest", "suites"} <= out.keys()
    assert (out["bundle"], out["version"]) == ("gpu-scheduling", "0.1.0")
    by_name = {s["name"]: s for s in out["suites"]}
    assert by_name["static"]["result"] == "passed"
    fr = by_name["fault_remediation"]
    assert all({"name", "result", "reason", "seconds"} <= c.keys() for c in fr["cases"])
    assert fr["result"] == "passed", [(c["name"], c["reason"]) for c in fr["cases"] if c["result"] != "passed"]
    assert rc == 0
    assert out["cluster"]["kubernetesVersion"] == "v1.36.3"
    assert any("gpu-health" in x and "real process" in x for x in out["cluster"]["live"])
    for name in ("evidence.dsse.json", "statement.json", "junit.xml", "report.html", "bundle.lock.json"):
        assert (ev / name).is_file(), name
    env, _ = evidence.load(ev / "evidence.dsse.json")
    statement = evidence.verify(env, {key.keyid: keys.load_public(key.public_path)})
    assert statement["subject"][0]["digest"]["sha256"] == out["digest"].removeprefix("sha256:")

    # The gate: trusted key, suites required by the policy for this bundle = the ones it ran.
    assert main([*cat, "keys", "trust", str(key.public_path), "--channel", "candidate", "--channel", "stable"]) == 0
    policy = repo_copy / "channels" / "policy.yaml"
    policy.write_text(policy.read_text().replace("requireBundleSuites: true", "requireBundleSuites: false"))
    capsys.readouterr()
    assert main([*cat, "promote", "gpu-scheduling@0.1.0", "--to", "stable", "--evidence", str(ev)]) == 1
    assert "candidate" in capsys.readouterr().err  # stable only through candidate
    assert main([*cat, "promote", "gpu-scheduling@0.1.0", "--to", "candidate", "--evidence", str(ev)]) == 0
    assert main([*cat, "promote", "gpu-scheduling@0.1.0", "--to", "stable", "--evidence", str(ev)]) == 0

    # Tampered evidence is refused and the channel file stays byte-identical.
    stable = repo_copy / "channels" / "stable.yaml"
    before = stable.read_bytes()
    env_json = json.loads((ev / "evidence.dsse.json").read_text())
    env_json["payload"] = env_json["payload"][:-8] + "AAAAAAA="
    (ev / "evidence.dsse.json").write_text(json.dumps(env_json))
    assert main([*cat, "promote", "gpu-scheduling@0.1.0", "--to", "stable", "--evidence", str(ev)]) == 1
    assert stable.read_bytes() == before


def test_kai_suites_fail_with_their_cause_on_sim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """KAI cannot run here (docs/kai.md): the suite must fail fast and say why, not hang or pass."""
    rc = main([
        "certify", "gpu-scheduling", "--cluster", "sim", "--suite", "fractional_gpu",
        "--cluster-name", f"kai-{os.getpid()}", "--json",
    ])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    by_name = {s["name"]: s for s in out["suites"]}
    pre = by_name["fractional_gpu"]["cases"][0]
    assert pre["name"] == "preflight" and pre["result"] == "failed"
    assert "Config kai-config" in pre["reason"] and "kai-scheduler-default" in pre["reason"]
    assert all(c["result"] == "skipped" for c in by_name["fractional_gpu"]["cases"][1:])
    # KAI's pods are only simulated by kwok here: its gate is not waited for, and the evidence says so.
    assert out["cluster"]["readiness"] == {"kai-scheduler": "simulated", "team-queues": "ready", "gpu-health": "ready"}
    assert "readiness" not in by_name
