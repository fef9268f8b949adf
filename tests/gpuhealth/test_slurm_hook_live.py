"""gpu-health's scontrol hook against a real slurmctld: it drains with its own prefix, never
overwrites nor resumes a drain someone else set, and resumes only its own drains."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from gpucatalog.clusters import slurm
from gpucatalog.core import executor
from gpucatalog.gpuhealth.slurm import DEFAULT_PREFIX, ScontrolSlurm

pytestmark = pytest.mark.slurm


def _hook(cluster: slurm.SlurmCluster) -> ScontrolSlurm:
    conf = cluster.endpoints()["slurm_conf"]
    # `env` sets SLURM_CONF for scontrol alone, as the sim kubelet's environment does for the pod
    return ScontrolSlurm(scontrol=("env", f"SLURM_CONF={conf}", "scontrol"), prefix=DEFAULT_PREFIX)


def _scontrol(cluster: slurm.SlurmCluster, *args: str, check: bool = True) -> None:
    executor.run(["scontrol", *args], env=cluster.env, check=check)


def test_hand_drain_is_neither_overwritten_nor_resumed(live_cluster: slurm.SlurmCluster) -> None:
    hook = _hook(live_cluster)
    node = live_cluster.node_names()[-1]
    _scontrol(live_cluster, "update", f"NodeName={node}", "State=DRAIN", "Reason=ops: bad fan, keep out")
    try:
        assert hook.drain(node, f"{DEFAULT_PREFIX} XID 48 on GPU 0") is False
        state, reason = hook.state(node)
        assert "DRAIN" in state and reason == "ops: bad fan, keep out"
        hook.resume(node)
        state, reason = hook.state(node)
        assert "DRAIN" in state and reason == "ops: bad fan, keep out"
    finally:
        _scontrol(live_cluster, "update", f"NodeName={node}", "State=RESUME", check=False)


def test_own_drain_is_set_refreshed_and_resumed(live_cluster: slurm.SlurmCluster) -> None:
    hook = _hook(live_cluster)
    node = live_cluster.node_names()[0]
    try:
        assert hook.drain(node, "XID 48 on GPU 0") is True  # prefix added when missing
        state, reason = hook.state(node)
        assert "DRAIN" in state and reason == f"{DEFAULT_PREFIX} XID 48 on GPU 0"
        assert hook.drain(node, f"{DEFAULT_PREFIX} XID 79 on GPU 1") is True  # our own drain: updated
        assert hook.state(node)[1] == f"{DEFAULT_PREFIX} XID 79 on GPU 1"
        hook.resume(node)
        state, _ = hook.state(node)
        assert "DRAIN" not in state
    finally:
        _scontrol(live_cluster, "update", f"NodeName={node}", "State=RESUME", check=False)


def test_drain_and_resume_only_own_drains(live_cluster: slurm.SlurmCluster) -> None:
    env_prefix = ["env", f"SLURM_CONF={live_cluster.env['SLURM_CONF']}", "scontrol"]
    hook = ScontrolSlurm(scontrol=env_prefix)
    mine, theirs = live_cluster.node_names()[:2]

    hook.drain(mine, "GpuXidError: XID 79 on GPU 2")
    state, reason = hook.state(mine)
    assert "DRAIN" in state and reason == "gpu-health: GpuXidError: XID 79 on GPU 2"
    hook.resume(mine)
    state, _ = hook.state(mine)
    assert "DRAIN" not in state

    other = ScontrolSlurm(scontrol=env_prefix, prefix="ops:")
    other.drain(theirs, "cable swap")
    try:
        hook.resume(theirs)  # not ours: must stay drained
        state, reason = hook.state(theirs)
        assert "DRAIN" in state and reason.startswith("ops:")
    finally:
        other.resume(theirs)


def test_busy_while_a_job_runs_on_the_drained_node_and_not_once_it_ended(live_cluster: slurm.SlurmCluster) -> None:
    """What gpu-health waits on before it evicts a drained node's pods and repairs it."""
    hook = _hook(live_cluster)
    node = live_cluster.node_names()[1]
    assert hook.busy(node) is False
    job = executor.run(["sbatch", "--parsable", "--output=/dev/null", "-w", node, "--gres=gpu:1",
                        "--wrap", "trap 'exit 0' USR1; sleep 600 & wait"], env=live_cluster.env).stdout.strip()
    try:
        _wait(lambda: hook.busy(node), f"job {job} running on {node}")
        hook.drain(node, "XID 48 on GPU 0")
        state, _ = hook.state(node)
        assert "DRAIN" in state and hook.busy(node), state  # draining: the job still runs
        executor.run(["scancel", "--batch", "--signal=USR1", job], env=live_cluster.env)
        _wait(lambda: not hook.busy(node), f"job {job} to end on {node}")
        assert "DRAIN" in hook.state(node)[0]
    finally:
        executor.run(["scancel", job], env=live_cluster.env, check=False)
        _scontrol(live_cluster, "update", f"NodeName={node}", "State=RESUME", check=False)


def _wait(probe: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
