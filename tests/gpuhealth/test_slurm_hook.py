"""The scontrol-based Slurm hook against real Slurm daemons: it drains with its own reason
prefix and resumes only its own drains, never an operator's."""

from __future__ import annotations

from typing import Any

import pytest

from gpucatalog.gpuhealth.slurm import ScontrolSlurm

pytestmark = pytest.mark.slurm

# the Slurm provider's session cluster (tests/slurm), present once the Slurm work is merged
live_cluster = pytest.importorskip("tests.slurm.conftest").live_cluster


def test_drain_and_resume_only_own_drains(live_cluster: Any) -> None:
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
