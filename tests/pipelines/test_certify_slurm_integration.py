"""`catalog certify slurm --cluster sim` end to end: sim cluster (2 x h100, 1 x h200), a real Slurm
cluster whose nodes carry the Kubernetes node names, the bundle installed through real helm,
gpu-health's controller (a real process run by the sim kubelet) draining the Slurm node of the
node it quarantines, every case of the `slurm` suite, signed evidence — and nothing left behind. The test owns its
cluster: certify starts it, and what teardown leaves is checked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpucatalog.cli import main
from gpucatalog.clusters.sim.cluster import SimCluster, list_clusters
from gpucatalog.clusters.slurm import cleanup
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.pipelines import keys
from tests.plugins.slurm_cluster import have_slurm

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

CASES = {"controller", "gres-placement", "gres-oversized", "preempt-requeue", "gpu-quota", "drain-on-fault",
         "manual-drain-kept"}


@pytest.mark.timeout(900)
def test_certify_slurm_on_sim_passes_with_drain_on_fault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not have_slurm():
        pytest.skip("Slurm daemons (slurmctld, slurmd, munge) not installed or not root")
    name = f"slurm-it-{os.getpid()}"
    key = keys.generate(tmp_path / "keys", "ci")
    evidence = tmp_path / "evidence"
    try:
        # --keep-cluster: the controller's own log is read afterwards; `down` is then checked below
        rc = main(["certify", "slurm", "--cluster", "sim", "--cluster-name", name, "--evidence", str(evidence),
                   "--signing-key", str(key.private_path), "--json", "--keep-cluster"])
        captured = capsys.readouterr()
        out = json.loads(captured.out)
        cases = {c["name"]: c for s in out["suites"] if s["name"] == "slurm" for c in s["cases"]}
        print(json.dumps({n: [c["result"], c["seconds"], c["details"]] for n, c in cases.items()}, indent=1))
        failed = {n: c["reason"] for s in out["suites"] for c in s["cases"] if c["result"] != "passed"
                  for n in [f"{s['name']}/{c['name']}"]}
        assert rc == 0, (failed, captured.err[-3000:])
        assert out["result"] == "passed"
        assert set(cases) == CASES and all(c["result"] == "passed" for c in cases.values())
        drain = cases["drain-on-fault"]["details"]
        # the Slurm node gpu-health drained is a Kubernetes node of the sim (h100-node-0000 …)
        assert drain["reason"].startswith("gpu-health:"), drain
        assert drain["drain_latency_s"] > 0
        nodes = cases["controller"]["details"]["nodes"]
        assert set(nodes) == {"h100-node-0000", "h100-node-0001", "h200-node-0000"}, nodes
        assert any("Slurm" in s for s in out["cluster"]["services"])
        for f in ("evidence.dsse.json", "statement.json", "junit.xml", "report.html", "bundle.lock.json"):
            assert (evidence / f).is_file(), f
        # gpu-health's controller (a real process run by the sim kubelet, SLURM_CONF exported to
        # it) went through a whole remediation on both faulted nodes — quarantine (when it calls
        # the Slurm drain) to healthy (resume) — and the hand drain kept its reason throughout
        sim = SimCluster(name)
        core = sim.core()
        # the nodes gpu-health drained: drain-on-fault's target and manual-drain-kept's control (the
        # hand-drained node's own fault may still be queued behind the control's repair)
        for case, key in (("drain-on-fault", "node"), ("manual-drain-kept", "control")):
            node = core.read_node(cases[case]["details"][key])
            ann = node.metadata.annotations or {}
            timeline = json.loads(ann.get("gpu-health.gpu-catalog.io/timeline", "{}"))
            assert {"quarantined", "repairing", "verifying", "healthy"} <= set(timeline), (case, timeline)
            assert len(json.loads(ann.get("gpu-health.gpu-catalog.io/fault-history", "[]"))) == 1, (case, ann)
            assert not node.spec.unschedulable
        assert cases["manual-drain-kept"]["details"]["reason_after"].startswith("ops: hand drain")
        specs = sorted(sim.layout.nodes.glob("*/pods/gpu-health_gpu-health-controller-*/controller.json"))
        assert specs and all(json.loads(p.read_text())["env"]["SLURM_CONF"] == str(sim.layout.slurm_conf) for p in specs)
    finally:
        if name in list_clusters():
            SimCluster(name).down()
    # `down` removed the sim folder and every Slurm daemon, job and step of it
    assert name not in list_clusters()
    slurm_dir = SimCluster(name).layout.slurm
    assert not slurm_dir.exists()
    assert cleanup._marked(Layout(slurm_dir)) == set()
