"""The slurm suite's drain cases judge what they claim (issue 14 item 10, issue 16), shown on a
live Slurm cluster:

- manual-drain-kept with gpu-health down (a fault that goes nowhere): the old case passed, since
  nobody touched the hand drain; now it waits for gpu-health to drain a control node and fails.
- drain-on-fault fails when a job starts on the target while Slurm shows it drained, and passes
  when a job starts there only after a repair resumed it (gpu-health repairs XID 48 on its own:
  the old check then failed with "started on drained node", seen live with Kubernetes 1.35); a
  drain lifted before Slurm placed the new work leaves the claim unjudged: not run, never passed.
- a case that fails midway clears the fault it injected.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.clusters import slurm
from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.slurm import cli as slurm_cli
from gpucatalog.validators.conformance.slurm import drain as slurm_drain
from gpucatalog.validators.conformance.slurm import steps as slurm_steps

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
    res = _case(slurm_drain.manual_drain_kept, ctx, cli)
    assert res.result == "failed" and "proof it saw this fault" in res.reason, res.reason
    assert cleared == [res.details["control"]]  # the one fault injected before the case failed is cleared
    assert not cli.nodes()[nodes[-1]].drained  # the case's own hand drain undone


class LyingSlurm(slurm_cli.Slurm):
    """Real Slurm, but once ``lie`` is set it reports ``target`` drained by gpu-health while it
    really schedules there: a Slurm that starts jobs on a node it shows drained."""

    def __init__(self, conf: str, target: str) -> None:
        super().__init__(conf)
        self.target, self.lie = target, False

    def nodes(self) -> dict[str, slurm_cli.Node]:
        found = super().nodes()
        if self.lie:
            n = found[self.target]
            found[self.target] = dataclasses.replace(n, state="draining", reason="gpu-health: XID 48 (test)",
                                                     reason_time="2026-01-01T00:00:00")
        return found


def _target(cli: slurm_cli.Slurm) -> str:
    low = min(cli.partitions().items(), key=lambda kv: kv[1])[0]
    return slurm_steps.gpu_nodes(cli, low)[0].name


def test_drain_on_fault_fails_when_a_job_starts_on_the_drained_node(live_cluster: slurm.SlurmCluster,
                                                                    tmp_path: Path) -> None:
    conf = live_cluster.endpoints()["slurm_conf"]
    lying = LyingSlurm(conf, _target(slurm_cli.Slurm(conf)))
    cleared: list[str] = []
    ctx = _ctx(conf, tmp_path, inject_fault=lambda node, kind, **kw: setattr(lying, "lie", True),
               clear_fault=cleared.append)
    res = _case(slurm_drain.drain_on_fault, ctx, lying)
    assert res.result == "failed", res
    assert f"started on drained node {lying.target} (drained since 2026-01-01T00:00:00" in res.reason, res.reason
    assert cleared == [lying.target]  # the fault is cleared although the case failed midway


def test_drain_on_fault_passes_when_a_job_starts_there_after_the_resume(live_cluster: slurm.SlurmCluster,
                                                                        tmp_path: Path) -> None:
    conf = live_cluster.endpoints()["slurm_conf"]
    cli = slurm_cli.Slurm(conf)
    target = _target(cli)

    def repaired(msg: str) -> None:
        # gpu-health's repair returning the node while its running job still runs (XID 48 on the
        # sim), synchronised on the case saying it has judged the new work while drained
        if msg.startswith("slurm/drain-on-fault: new work refused"):
            cli.resume(target)

    ctx = base.SuiteContext(kubeconfig=tmp_path / "unused", endpoints={"slurm_conf": conf}, log=repaired, params={
        "inject_fault": lambda node, kind, **kw: cli.drain(node, f"gpu-health: {kind} {kw} (test)"),
        "clear_fault": lambda node: cli.resume(node, check=False)})
    res = _case(slurm_drain.drain_on_fault, ctx, cli)
    assert res.result == "passed", res.reason
    d = res.details
    assert list(d["new_jobs"].values()).count("PENDING") == 1, d  # judged while drained: one pended
    assert d["drain_held_to_end"] is False
    # the pending job then started on the resumed target: the old check failed the case here
    assert len(d["started_after_resume"]) == 1, d
    assert not cli.nodes()[target].drained


def test_drain_on_fault_fails_when_the_drain_kills_the_running_job(live_cluster: slurm.SlurmCluster,
                                                                   tmp_path: Path) -> None:
    conf = live_cluster.endpoints()["slurm_conf"]
    cli = slurm_cli.Slurm(conf)

    def drain_and_kill(node: str, kind: str, **kw: Any) -> None:
        # a controller whose "drain" also ends the node's work
        cli.drain(node, "gpu-health: test")
        cli.run(["scancel", f"--nodelist={node}"])

    ctx = _ctx(conf, tmp_path, inject_fault=drain_and_kill, clear_fault=lambda node: cli.resume(node, check=False))
    res = _case(slurm_drain.drain_on_fault, ctx, cli)
    assert res.result == "failed" and "a drain lets running work finish" in res.reason, res.reason
    assert not cli.nodes()[res.details["node"]].drained  # cleared (resumed) although it failed


def test_drain_on_fault_is_not_run_when_the_drain_lifts_before_the_work_is_placed(
        live_cluster: slurm.SlurmCluster, tmp_path: Path) -> None:
    conf = live_cluster.endpoints()["slurm_conf"]
    target = _target(slurm_cli.Slurm(conf))

    class FastRepair(slurm_cli.Slurm):
        """The repair lands between the drain and the first new job (a resume before submitting)."""

        def sbatch(self, *args: str, wrap: str) -> str:
            if wrap == slurm_steps.LONG and self.nodes()[target].drained:
                self.resume(target)
            return super().sbatch(*args, wrap=wrap)

    cli = FastRepair(conf)
    ctx = _ctx(conf, tmp_path, inject_fault=lambda node, kind, **kw: cli.drain(node, "gpu-health: test"),
               clear_fault=lambda node: cli.resume(node, check=False))
    res = base.CaseResult(name="case", result="passed", details={"jobs": []})
    try:
        with pytest.raises(base.CaseNotRun, match=f"{target} was resumed .* before Slurm had placed the new work"):
            slurm_drain.drain_on_fault(ctx, res, cli)
    finally:
        cli.cancel(res.details["jobs"])
    assert not cli.nodes()[target].drained


def test_drain_on_fault_clears_its_fault_when_it_fails(live_cluster: slurm.SlurmCluster, tmp_path: Path) -> None:
    conf = live_cluster.endpoints()["slurm_conf"]
    cli = slurm_cli.Slurm(conf)
    calls: list[tuple[str, str]] = []
    ctx = _ctx(conf, tmp_path, inject_fault=lambda node, kind, **kw: calls.append(("inject", node)),
               clear_fault=lambda node: calls.append(("clear", node)), drain_timeout=3)
    res = _case(slurm_drain.drain_on_fault, ctx, cli)
    assert res.result == "failed" and "to be drained" in res.reason
    assert calls == [("inject", res.details["node"]), ("clear", res.details["node"])]
