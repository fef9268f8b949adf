"""The sim provider's Slurm services survive nothing: a process that started a sim cluster and its
Slurm cluster is killed (a crashed certify), and a later `down` from another process still stops
every Slurm daemon and removes every folder. Also: Slurm node names are the Kubernetes node
names, and the sim kubelet hands SLURM_CONF only to pods started while Slurm runs."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from gpucatalog.clusters.sim.cluster import SimCluster, list_clusters
from gpucatalog.clusters.slurm import cleanup
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.core import executor
from tests.conftest import REPO as ROOT
from tests.conftest import RenderChart
from tests.plugins.slurm_cluster import have_slurm

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

STARTER = """
import json, sys, time
from gpucatalog.clusters.sim.cluster import SimCluster
c = SimCluster(sys.argv[1])
c.up(2, "h100-80gb-x8")
print(json.dumps(c.start_services(json.load(open(sys.argv[2])))), flush=True)
print("READY", flush=True)
time.sleep(600)
"""


@pytest.mark.timeout(300)
def test_down_after_a_crash_stops_every_slurm_process(tmp_path: Path, render_chart: RenderChart) -> None:
    if not have_slurm():
        pytest.skip("Slurm daemons (slurmctld, slurmd, munge) not installed or not root")
    name = f"slurm-crash-{os.getpid()}"
    docs = render_chart("slurm", set_json=['nodesets={"h100":{"enabled":true,"replicas":2,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":8}}}', 'accounting={"enabled":false}'])
    objs = tmp_path / "objects.json"
    objs.write_text(json.dumps(docs))
    log = tmp_path / "starter.log"
    proc = executor.spawn([sys.executable, "-c", STARTER, name, str(objs)], log_path=log,
                          env={"PYTHONPATH": str(ROOT)})
    sim = SimCluster(name)
    try:
        deadline = time.monotonic() + 240
        while "READY" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        assert "READY" in log.read_text(), log.read_text()[-3000:]
        assert "h100-node-0000, h100-node-0001" in log.read_text()
        conf = sim.layout.slurm_conf.read_text()
        assert "NodeName=h100-node-0000" in conf and "NodeName=h100-node-0001" in conf
        assert sim.endpoints() == {"slurm_conf": str(sim.layout.slurm_conf)}
        os.killpg(proc.pid, signal.SIGKILL)  # the starter dies; its daemons live on
        proc.wait()
        slurm_layout = Layout(sim.layout.slurm)
        assert cleanup._marked(slurm_layout), "Slurm daemons should outlive the crashed starter"
        SimCluster(name).down()
        assert name not in list_clusters()
        assert not sim.layout.slurm.exists()
        assert cleanup._marked(slurm_layout) == set()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if name in list_clusters():
            SimCluster(name).down()
