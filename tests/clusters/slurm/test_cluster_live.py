"""The local Slurm cluster's own behaviour: devices, registration, conflicts, crash cleanup."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from gpucatalog.clusters import slurm
from gpucatalog.clusters.slurm import cleanup
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.core import errors, executor
from tests.conftest import REPO as ROOT
from tests.plugins.slurm_cluster import have_slurm

pytestmark = pytest.mark.slurm


def test_nodes_register_with_typed_gpus_backed_by_char_devices(live_cluster: slurm.SlurmCluster) -> None:
    for i in range(8):
        mode = (live_cluster.layout.dev / f"nvidia{i}").stat().st_mode
        assert stat.S_ISCHR(mode)
    out = executor.run(["sinfo", "-h", "-N", "-p", "batch", "-o", "%N %G %T"], env=live_cluster.env).stdout
    rows = sorted(tuple(line.split()) for line in out.splitlines())
    assert rows == [("h100-0", "gpu:h100:8", "idle"), ("h100-1", "gpu:h100:8", "idle"), ("h200-0", "gpu:h200:8", "idle")]
    # Every daemon listens on loopback only.
    assert live_cluster.ports is not None
    ss = executor.run(["ss", "-Hltn"]).stdout
    for port in [live_cluster.ports.slurmctld, *live_cluster.ports.slurmd.values()]:
        listeners = [ln.split()[3] for ln in ss.splitlines() if ln.split()[3].endswith(f":{port}")]
        assert listeners == [f"127.0.0.1:{port}"]


def test_second_cluster_on_same_state_dir_conflicts(live_cluster: slurm.SlurmCluster) -> None:
    with pytest.raises(errors.ConflictError):
        slurm.SlurmCluster(live_cluster.spec, live_cluster.layout.root).start()
    # The refused start must not have touched the running cluster.
    assert live_cluster.layout.pids.exists()
    assert not live_cluster.sup.dead()


CRASHER = """
import os, sys
from pathlib import Path
from gpucatalog.clusters import slurm
from gpucatalog.core import executor
spec = slurm.ClusterSpec("crash", (slurm.NodeSetSpec("h100", 2, "h100", 8),),
    ("GresTypes=gpu", "PartitionName=batch Nodes=h100 Default=YES"), accounting=True)
c = slurm.SlurmCluster(spec, Path(sys.argv[1]))
c.start()
executor.run(["sbatch", "--gres=gpu:2", "--output=/dev/null", "--wrap", "sleep 300"], env=c.env)
executor.run(["sbatch", "--gres=gpu:2", "--output=/dev/null", "--wrap", "sleep 300"], env=c.env)
print("started", flush=True)
os._exit(3)  # the owner dies without stop(): daemons, job steps and MariaDB stay behind
"""


@pytest.mark.timeout(120)
def test_stop_after_owner_crash_kills_everything_and_removes_state(tmp_path: Path) -> None:
    if not have_slurm():
        pytest.skip("Slurm daemons not installed or not root")
    root = tmp_path / "crashed"
    res = executor.run([sys.executable, "-c", CRASHER, str(root)], env={"PYTHONPATH": str(ROOT)}, check=False, timeout=90)
    assert res.returncode == 3, res.stderr
    lay = Layout(root)
    names = {row["name"] for row in json.loads(lay.pids.read_text())}
    assert {"munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd/h100-0", "slurmd/h100-1"} <= names
    survivors = cleanup._marked(lay)
    assert len(survivors) >= 6  # daemons plus the jobs' slurmstepd
    slurm.stop_state_dir(root)
    assert not root.exists()
    assert cleanup._marked(lay) == set()
    for pid in survivors:
        assert not Path(f"/proc/{pid}").exists() or cleanup._alive(pid) is False, pid
    # Nothing with the state folder on its command line either.
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                assert str(root) not in (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                pass
