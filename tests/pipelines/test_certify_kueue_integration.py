"""`catalog certify gpu-queueing --cluster sim` end to end: Kueue's pinned manager runs live under
the sim kubelet, the team queues go through its webhooks, and the queueing contract's suites pass
on it; the evidence says Kueue ran live and at which version."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpucatalog.cli import main
from gpucatalog.pipelines import keys

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_certify_gpu_queueing_on_live_kueue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = keys.generate(tmp_path / "keys", "ci")
    rc = main(["certify", "gpu-queueing", "--cluster", "sim", "--suite", "quota_reclaim", "--suite", "gang",
               "--cluster-name", f"certq-{os.getpid()}", "--signing-key", str(key.private_path),
               "--evidence", str(tmp_path / "evidence"), "--json"])
    out = json.loads(capsys.readouterr().out)
    suites = {s["name"]: s for s in out["suites"]}
    failed = [(s, c["name"], c["reason"]) for s in suites.values() for c in s["cases"] if c["result"] != "passed"]
    assert rc == 0 and out["result"] == "passed", failed
    assert set(suites) == {"static", "quota_reclaim", "gang"}
    live = [line for line in out["cluster"]["live"] if "kueue-controller-manager" in line]
    assert live and "registry.k8s.io/kueue/kueue:v0.17.0" in live[0] and "real process" in live[0]
    statement = json.loads((tmp_path / "evidence" / "statement.json").read_text())
    pre = suites["quota_reclaim"]["cases"][0]
    assert pre["details"]["stack"] == "kueue" and pre["details"]["kueue_image"].endswith(":v0.17.0")
    latency = next(c for c in suites["quota_reclaim"]["cases"] if c["name"] == "reclaim_borrowed_gpus")["details"]["latency"]
    assert latency["count"] > 0 and latency["p95"] >= latency["p50"] > 0
    assert statement["predicate"]["tools"]["kueue"] == "v0.17.0"
