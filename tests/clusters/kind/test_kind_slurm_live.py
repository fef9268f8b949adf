"""Slurm on kind for real (``@pytest.mark.kind``): ``catalog certify slurm@0.2.1 --cluster kind``.

Slurm's daemons run in pods on real kubelets (slurmctld with slurmdbd and MariaDB on the
control-plane node, a slurmd on each of the three GPU workers), from an image built here from
Debian's packages. gpu-health's real agent reads the simulated node hardware, and its controller
(in a pod beside slurmctld) drains and resumes the Slurm node through ``scontrol``. The suite's
own commands run on the host. The cluster goes with the certification, the host's munged too."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

from gpucatalog.cli import main
from gpucatalog.clusters.kind import cluster, images
from gpucatalog.pipelines import keys

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1200)]
CASES = ["controller", "gres-placement", "gres-oversized", "preempt-requeue", "gpu-quota", "drain-on-fault",
         "manual-drain-kept"]


@pytest.fixture(scope="module")
def engine_up() -> None:
    prov = cluster.KindCluster("probe")
    if not prov.available():
        pytest.skip(prov.reason())


def test_slurm_certifies_on_kind_with_its_daemons_in_pods(engine_up: None, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    name = f"slurmk-{uuid.uuid4().hex[:6]}"
    prov = cluster.KindCluster(name)
    key = keys.generate(tmp_path / "keys", "ci")
    try:
        rc = main(["certify", "slurm@0.2.1", "--cluster", "kind", "--cluster-name", name,
                   "--signing-key", str(key.private_path), "--evidence", str(tmp_path / "ev"), "--json"])
        captured = capsys.readouterr()
        sys.stderr.write(captured.err)  # certify's progress, shown again should the test fail
        out = json.loads(captured.out)
        # a step that failed before the suite (services, install) names its cause here
        steps = [(s["name"], s["result"], [c["reason"] for c in s["cases"] if c["result"] != "passed"])
                 for s in out["suites"]]
        ran = [s for s in out["suites"] if s["name"] == "slurm"]
        assert len(ran) == 1, f"no slurm suite ran: {steps}"
        suite = ran[0]
        cases = {c["name"]: c for c in suite["cases"]}
        assert rc == 0 and out["result"] == "passed", [(n, c["result"], c["reason"]) for n, c in cases.items()]
        assert list(cases) == CASES and all(c["result"] == "passed" for c in cases.values())
        # gpu-health's controller, in its pod, drained the faulted node through scontrol
        drain = cases["drain-on-fault"]["details"]
        assert drain["drain_latency_s"] < 30 and drain["drain_held_to_end"] in (True, False)
        live, simulated = out["cluster"]["live"], out["cluster"]["simulated"]
        assert any(line.startswith("Slurm (Debian slurm-wlm) in pods") for line in live), live
        assert any(line.startswith(f"image {images.slurm_ref()} built locally from Debian bookworm") for line in live)
        assert any(line.startswith("image ghcr.io/gpu-catalog/gpu-health:0.1.0 built locally") and "Slurm 22.05" in line
                   for line in live), live
        operator = "image ghcr.io/slinkyproject/slurm-operator:1.2.1 built locally from SIMULATED stand-in"
        assert any(line.startswith(operator) for line in simulated), simulated
        assert not any("slurm-operator" in line for line in live), live
        assert any(line.startswith("Slinky operator reconciliation: not run") for line in simulated), simulated
        assert any("in pods: slurmctld on gpucatalog-" in line and "3 slurmd" in line for line in out["cluster"]["services"])
        # the image builds and loads were said as they went, not only once done
        assert "kind load image-archive: " in captured.err
    finally:
        prov.down()
    # nothing of it is left on the host: the cluster, its state folder and its munged
    assert not prov.exists() and not prov.state.exists()
    left = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if str(prov.state).encode() in (proc / "cmdline").read_bytes():
                left.append(proc.name)
        except OSError:
            continue
    assert not left, f"processes of the cluster's state folder still run: {left}"
