"""The ``slurm`` conformance suite against a real local Slurm cluster (slurmctld, slurmd, munge,
slurmdbd + MariaDB), configured from the rendered ``slurm`` chart."""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.clusters import slurm
from gpucatalog.clusters.slurm import cleanup
from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.slurm import suite as slurm_suite
from tests.conftest import RenderChart
from tests.plugins.slurm_cluster import have_slurm

pytestmark = pytest.mark.slurm


def gpu_health_hook(slurm_conf: str) -> Any:
    """gpu-health's own scontrol hook (gpucatalog.gpuhealth.slurm), driven directly."""
    try:
        mod = importlib.import_module("gpucatalog.gpuhealth.slurm")
    except ImportError:
        return None
    cls = getattr(mod, "ScontrolSlurm", None)
    if cls is None:
        return None
    # `env` sets SLURM_CONF for scontrol alone: the hook runs argument lists, no shell.
    return cls(scontrol=("env", f"SLURM_CONF={slurm_conf}", "scontrol"), prefix=mod.DEFAULT_PREFIX)


@pytest.mark.timeout(600)
def test_suite_passes_on_live_cluster(live_cluster: slurm.SlurmCluster, tmp_path: Path) -> None:
    conf = live_cluster.endpoints()["slurm_conf"]
    params: dict[str, Any] = {}
    hook = gpu_health_hook(conf)
    if hook is not None:
        # The fault path of gpu-health, entered at its Slurm hook: the controller calls drain()
        # with its prefixed reason on a fault and resume() after verification.
        params.update(
            inject_fault=lambda node, kind, **kw: hook.drain(node, f"{kind} {kw} (conformance)"),
            clear_fault=hook.resume,
            drain_reason_prefix=hook.prefix,
        )
    ctx = base.SuiteContext(kubeconfig=tmp_path / "unused", params=params, endpoints={"slurm_conf": conf}, log=print)
    result = slurm_suite.run(ctx)
    by_name = {c.name: c for c in result.cases}
    failed = {c.name: c.reason for c in result.cases if c.result == "failed"}
    assert not failed, failed
    assert by_name["preempt-requeue"].details["victim_restarts"] >= 1
    assert by_name["gpu-quota"].details["over_reason"] == "AssocGrpGRES"
    if hook is None:
        assert by_name["drain-on-fault"].result == "skipped"
    else:
        assert by_name["drain-on-fault"].result == "passed"
        drain = by_name["drain-on-fault"].details
        assert drain["reason"].startswith(hook.prefix)
        # nothing resumed the node before the case's clear: Slurm's drain mark (reason time) stayed
        # the same through the running job's end (draining -> drained), judged on the idle node too
        assert drain["drain_held_to_end"] is True and drain["started_after_resume"] == {}, drain
        assert list(drain["new_jobs"].values()).count("PENDING") == 1, drain
        assert by_name["manual-drain-kept"].result == "passed"


@pytest.mark.timeout(180)
def test_slurmctld_killed_mid_suite_fails_with_cause_and_down_cleans(tmp_path: Path, render_chart: RenderChart) -> None:
    if not have_slurm():
        pytest.skip("Slurm daemons not installed or not root")
    spec = slurm.from_manifests(render_chart("slurm", set_json=['nodesets={"h100":{"enabled":true,"replicas":2,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":8}}}']), accounting=False)
    spec = slurm.ClusterSpec(
        spec.cluster_name, spec.nodesets,
        tuple(line for line in spec.extra_conf if not line.startswith("AccountingStorage")), accounting=False,
    )
    cluster = slurm.SlurmCluster(spec, tmp_path / "c")
    cluster.start()
    ctld = next(d for d in cluster.sup.daemons if d.name == "slurmctld")

    def log(msg: str) -> None:
        if msg == "slurm/gres-placement: running":
            ctld.proc.kill()

    try:
        ctx = base.SuiteContext(kubeconfig=tmp_path / "unused", endpoints=cluster.endpoints(), log=log)
        t0 = time.monotonic()
        result = slurm_suite.run(ctx)
        elapsed = time.monotonic() - t0
        assert result.result == "failed"
        assert result.cases[0].result == "passed"
        for case in result.cases[1:]:
            assert case.result == "failed"
            assert "slurmctld is not responding" in case.reason, case.reason
        assert elapsed < 90, f"the suite took {elapsed:.0f}s after slurmctld died"
    finally:
        cluster.stop()
    assert not cluster.layout.root.exists()
    assert cleanup._marked(cluster.layout) == set()
