"""The slurm suite's drain cases can fail (issue 14, item 10), shown on a live Slurm cluster:
each test first shows the old check passing where it should not, then the case failing.

- manual-drain-kept with gpu-health down (a fault that goes nowhere): the old case passed, since
  nobody touched the hand drain; now it waits for gpu-health to drain a control node and fails.
- drain-on-fault's "no new job lands there": the old check ran while a job still filled the
  target, so a whole-node job could not land there drained or not; now offered on an idle node.
- a case that fails midway clears the fault it injected.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.clusters import slurm
from gpucatalog.validators.conformance import base, slurm_cli, slurm_suite

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(300)]


def _ctx(conf: str, tmp_path: Path, **params: Any) -> base.SuiteContext:
    return base.SuiteContext(kubeconfig=tmp_path / "unused", params=params, endpoints={"slurm_conf": conf})


def _case(fn: Any, ctx: base.SuiteContext, cli: slurm_cli.Slurm) -> base.CaseResult:
    res = base.CaseResult(name="case", result="passed", details={"jobs": []})
    try:
        fn(ctx, res, cli)
    except base.CaseFailed as exc:
        res.result, res.reason = "failed", str(exc)
    finally:
        cli.cancel(res.details["jobs"])
    return res


def test_manual_drain_kept_fails_when_gpu_health_never_sees_the_fault(live_cluster: slurm.SlurmCluster,
                                                                      tmp_path: Path) -> None:
    conf = live_cluster.endpoints()["slurm_conf"]
    cli = slurm_cli.Slurm(conf)
    nodes = sorted(n.name for n in cli.nodes().values() if n.gpus)
    # The old case: hand-drain, inject (gpu-health is down: nothing happens), clear, look again.
    reason = f"ops: old-case demo {os.getpid()}"
    cli.drain(nodes[-1], reason)
    try:
        n = cli.nodes()[nodes[-1]]
        assert n.drained and n.reason.startswith(reason)  # what the old case accepted as a pass
    finally:
        cli.resume(nodes[-1], check=False)
    cleared: list[str] = []
    ctx = _ctx(conf, tmp_path, inject_fault=lambda node, kind, **kw: None, clear_fault=cleared.append,
               drain_timeout=5, observe_s=0)
    res = _case(slurm_suite._manual_drain_kept, ctx, cli)
    assert res.result == "failed" and "proof it saw this fault" in res.reason, res.reason
    assert sorted(cleared) == sorted([nodes[0], nodes[-1]])  # both injected faults cleared
    assert not cli.nodes()[nodes[-1]].drained  # the case's own hand drain undone


def test_new_work_check_fails_when_the_target_is_not_drained(live_cluster: slurm.SlurmCluster, tmp_path: Path) -> None:
    conf = live_cluster.endpoints()["slurm_conf"]
    cli = slurm_cli.Slurm(conf)
    low = min(cli.partitions().items(), key=lambda kv: kv[1])[0]
    nodes = slurm_suite._gpu_nodes(cli, low)
    target = nodes[0]
    ctx = _ctx(conf, tmp_path)
    jobs: list[str] = []
    try:
        # The old check: a 1-GPU job still on the (undrained) target, then whole-node jobs.
        jobs.append(cli.sbatch("-p", low, "-w", target.name, "--gres=gpu:1", wrap="sleep 60"))
        slurm_suite._wait_job(ctx, cli, jobs[0], ("RUNNING",), 30)
        old = [cli.sbatch("-p", low, f"--gres=gpu:{target.gpus}", "-N", "1", wrap="sleep 60") for _ in nodes]
        jobs += old
        base.wait_for("the other nodes' jobs to run", lambda: sum(cli.job(j).state == "RUNNING" for j in old) >= len(nodes) - 1,
                      30)
        assert not any(target.name in cli.job(j).nodes.split(",") for j in old)  # old check: "passed"
        cli.cancel(jobs)
        jobs.clear()
        base.wait_for("jobs gone", lambda: all(cli.job(j).state not in ("RUNNING", "COMPLETING") for j in old), 30)
        # The new check, same undrained target, now idle: it takes a job and the check fails.
        with pytest.raises(base.CaseFailed, match=f"started on drained node {target.name}"):
            slurm_suite._new_work_avoids(ctx, cli, low, nodes, target, jobs)
    finally:
        cli.cancel(jobs)


def test_drain_on_fault_clears_its_fault_when_it_fails(live_cluster: slurm.SlurmCluster, tmp_path: Path) -> None:
    conf = live_cluster.endpoints()["slurm_conf"]
    cli = slurm_cli.Slurm(conf)
    calls: list[tuple[str, str]] = []
    ctx = _ctx(conf, tmp_path, inject_fault=lambda node, kind, **kw: calls.append(("inject", node)),
               clear_fault=lambda node: calls.append(("clear", node)), drain_timeout=3)
    res = _case(slurm_suite._drain_on_fault, ctx, cli)
    assert res.result == "failed" and "to be drained" in res.reason
    assert calls == [("inject", res.details["node"]), ("clear", res.details["node"])]
