"""`catalog certify gpu-queueing --cluster sim` end to end, the README's main job: Kueue's pinned
manager runs live under the sim kubelet, the team queues go through its webhooks, and every suite
of the bundle passes (the queueing contract's, fault remediation through gpu-health, and DRA GPU
sharing allocated by kube-scheduler); the evidence says Kueue ran live and at which version, and
that the DRA driver's kubelet plugin was the sim's stand-in. Its signed evidence is then a cell of the
compatibility matrix: `catalog matrix` reads it back for the default Kubernetes release and runs
nothing again (the matrix's own cluster path is driven with stand-ins in test_matrix.py). The test
owns its cluster: the main job starts and stops it, and that is part of what is tested."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpucatalog.catalog import loader
from gpucatalog.cli import main
from gpucatalog.pipelines import keys, matrix, matrix_files
from gpucatalog.toolchain import releases

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


def test_certify_gpu_queueing_main_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = keys.generate(tmp_path / "keys", "ci")
    # written where a matrix over tmp_path/"m" keeps the cell of 0.4.4 on the default release
    evidence = tmp_path / "m" / "cells" / "gpu-queueing" / "0.4.4" / releases.minor(releases.default())
    rc = main(["certify", "gpu-queueing", "--cluster", "sim",
               "--cluster-name", f"certq-{os.getpid()}", "--signing-key", str(key.private_path),
               "--evidence", str(evidence), "--json"])
    out = json.loads(capsys.readouterr().out)
    suites = {s["name"]: s for s in out["suites"]}
    failed = [(s, c["name"], c["reason"]) for s in suites.values() for c in s["cases"] if c["result"] != "passed"]
    assert rc == 0 and out["result"] == "passed", failed
    assert set(suites) == {"static", "quota_reclaim", "gang", "accelerator_metrics", "fault_remediation", "gpu_sharing_dra",
                           "logs"}
    assert (out["bundle"], out["version"]) == ("gpu-queueing", "0.4.4")  # the newest version
    # Kueue's chart 0.2.0 (since 0.4.0): its integrations' RBAC proven by a log without a denial
    (kueue_logs,) = suites["logs"]["cases"]
    assert kueue_logs["name"] == "kueue-logs" and kueue_logs["details"]["logs_read"] >= 1
    stand_in = [line for line in out["cluster"]["simulated"] if "SIM STAND-IN" in line]
    assert stand_in and "nvidia-dra-driver-kubelet-plugin" in stand_in[0], out["cluster"]["simulated"]
    # 0.3.0's driver and since: the kubernetes-sigs release, its pod run by the same stand-in
    assert "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0" in stand_in[0]
    live = [line for line in out["cluster"]["live"] if "kueue-controller-manager" in line]
    assert live and "registry.k8s.io/kueue/kueue:v0.17.0" in live[0] and "real process" in live[0]
    statement = json.loads((evidence / "statement.json").read_text())
    pre = suites["quota_reclaim"]["cases"][0]
    assert pre["details"]["stack"] == "kueue" and pre["details"]["kueue_image"].endswith(":v0.17.0")
    latency = next(c for c in suites["quota_reclaim"]["cases"] if c["name"] == "reclaim_borrowed_gpus")["details"]["latency"]
    assert latency["count"] > 0 and latency["p95"] >= latency["p50"] > 0
    assert statement["predicate"]["tools"]["kueue"] == "v0.17.0"

    # the same evidence, read back as a matrix cell: verified, green, nothing run again
    (cell,) = matrix.run(loader.load_catalog(), matrix.Options(
        bundles=["gpu-queueing@0.4.4"], kubernetes=[releases.default()], out_dir=tmp_path / "m",
        signing_key=key.private_path, run=False), print)
    assert cell.cached and cell.status == "passed", cell.detail
    assert cell.digest == "sha256:" + statement["subject"][0]["digest"]["sha256"]
    assert "✅ passed" in (tmp_path / "m" / matrix_files.MARKDOWN).read_text()
