"""Upgrade certification on the sim cluster (Kueue live; Slurm live): 0.1.0 -> 0.2.0 keeps every running
Job, gang and queue object and admits the pending Job (evidence records both digests and the
figures); a 0.3.0 that renames a department's Cohort fails, naming it; a 0.3.0 whose Kueue manager
crashes at start fails the upgrade naming that controller, and --rollback still restores 0.1.0.
Each test owns its cluster: an upgrade installs OLD on a cluster of its own and leaves it changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpucatalog.cli import main
from gpucatalog.pipelines import keys
from tests.pipelines.test_upgrade_inputs import breaking
from tests.plugins.slurm_cluster import have_slurm

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    key = keys.generate(tmp_path / "keys", "ci")
    rc = main([*args, "--cluster", "sim", "--cluster-name", f"upg-{os.getpid()}", "--signing-key", str(key.private_path),
               "--evidence", str(tmp_path / "evidence"), "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_upgrade_keeps_work_and_queues(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _run(tmp_path, capsys, "certify", "gpu-queueing@0.2.0", "--upgrade-from", "0.1.0", "--suite", "gang")
    failed = [(s["name"], c["name"], c["reason"]) for s in out["suites"] for c in s["cases"] if c["result"] != "passed"]
    assert rc == 0 and out["result"] == "passed", failed
    cases = {c["name"]: c for s in out["suites"] if s["name"] == "upgrade" for c in s["cases"]}
    assert {"workload-started-on-old", "upgrade-helm", "upgrade-running-work-kept", "upgrade-queues-kept",
            "upgrade-pending-admitted"} <= set(cases)
    # 0.2.0's new team gives the pending Job room while the old work still runs
    assert cases["upgrade-pending-admitted"]["details"]["admitted_with_work_running"] is True
    pred = json.loads((tmp_path / "evidence" / "statement.json").read_text())["predicate"]
    assert pred["upgradeFrom"]["version"] == "0.1.0" and pred["upgradeFrom"]["digest"].startswith("sha256:")
    assert pred["upgrade"]["upgrade"]["wallSeconds"] > 0 and pred["upgrade"]["upgrade"]["probes"] >= 1
    # what ran is recorded for OLD and for the end (NEW): the manager pod 0.2.0 replaced
    def manager(lines: list[str]) -> list[str]:
        return [ln for ln in lines if ln.startswith("pod kueue-system/kueue-controller-manager-")]
    start, end = manager(pred["cluster"]["live"]), manager(pred["cluster"]["atEnd"]["live"])
    assert len(start) == len(end) == 1 and start != end


def test_renamed_department_fails_the_upgrade(repo_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the research department's Cohort renamed, its teams moved to the new name: Helm deletes the
    # Cohort the running work's queues stood in (nothing static refuses this)
    breaking(repo_copy, """      kustomize:
        team-queues:
          patches:
            - target: {kind: Cohort, name: research}
              patch: |
                - op: replace
                  path: /metadata/name
                  value: research-v2
""" + "".join(f"""            - target: {{kind: ClusterQueue, name: {team}}}
              patch: |
                - op: replace
                  path: /spec/cohortName
                  value: research-v2
""" for team in ("vision", "language", "speech")))
    rc, out = _run(tmp_path, capsys, "--catalog-dir", str(repo_copy), "certify", "gpu-queueing@0.3.0",
                   "--upgrade-from", "0.1.0", "--suite", "gang")
    assert rc == 1 and out["result"] == "failed"
    cases = {c["name"]: c for s in out["suites"] if s["name"] == "upgrade" for c in s["cases"]}
    assert cases["upgrade-queues-kept"]["result"] == "failed"
    assert "Cohort research did not survive" in cases["upgrade-queues-kept"]["reason"]
    assert [s["name"] for s in out["suites"]] == ["static", "upgrade"]  # no suite runs after a lost upgrade


def test_crashing_controller_fails_the_upgrade_and_rollback_restores_old(
        repo_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 0.3.0's Kueue manager is started with a flag it does not know: the real binary exits at
    # every start, as a release with a broken controller would
    breaking(repo_copy, """      kustomize:
        kueue:
          patches:
            - target: {kind: Deployment, name: kueue-controller-manager}
              patch: |
                - op: add
                  path: /spec/template/spec/containers/0/args/-
                  value: --flag-this-release-broke
""")
    rc, out = _run(tmp_path, capsys, "--catalog-dir", str(repo_copy), "certify", "gpu-queueing@0.3.0",
                   "--upgrade-from", "0.1.0", "--rollback", "--suite", "gang", "--ready-timeout", "120",
                   # the broken manager never gets ready: its crash loop ends Helm's wait, well before
                   # this timeout would
                   "--install-timeout", "240")
    assert rc == 1 and out["result"] == "failed"
    cases = {c["name"]: c for s in out["suites"] if s["name"] == "upgrade" for c in s["cases"]}
    helm = cases["upgrade-helm"]
    assert helm["result"] == "failed" and "kueue-controller-manager" in helm["reason"], helm["reason"]
    assert "is crash-looping" in helm["reason"] and "marked failed" in helm["reason"], helm["reason"]
    # back on 0.1.0: Helm went back, the work that ran through the failed upgrade still runs, the
    # queues are 0.1.0's again, and the pending Job is admitted
    for name in ("rollback-helm", "rollback-running-work-kept", "rollback-queues-kept", "rollback-pending-admitted"):
        assert cases[name]["result"] == "passed", (name, cases[name]["reason"])


@pytest.mark.slurm
def test_slurm_upgrade_keeps_jobs_and_partitions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not have_slurm():
        pytest.skip("Slurm daemons (slurmctld, slurmd, munge) not installed or not root")
    rc, out = _run(tmp_path, capsys, "certify", "slurm@0.2.0", "--upgrade-from", "0.1.0")
    failed = [(s["name"], c["name"], c["reason"]) for s in out["suites"] for c in s["cases"] if c["result"] != "passed"]
    assert rc == 0 and out["result"] == "passed", failed
    cases = {c["name"]: c for s in out["suites"] if s["name"] == "upgrade" for c in s["cases"]}
    helm = cases["upgrade-helm"]["details"]
    # Slinky's CRDs went server-side, and the running Slurm cluster took 0.2.0's new partition
    assert "nodesets.slinky.slurm.net" in helm["crdsAppliedServerSide"]
    assert any("PartitionName=h200" in line for line in helm["servicesUpdated"])
    assert len(cases["workload-started-on-old"]["details"]["jobs"]) == 3
