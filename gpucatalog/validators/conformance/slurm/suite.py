"""Conformance suite ``slurm``: GPU scheduling, preemption, quota and drain on a Slurm cluster.

Talks to Slurm only through its CLI (``SLURM_CONF`` from ``ctx.endpoints["slurm_conf"]``), so the
same suite runs against the local sim cluster and a Slinky cluster. Cases:

- ``controller``: slurmctld answers, every node reports ``gpu`` gres.
- ``gres-placement``: ``--gres=gpu:N`` jobs land only where GPUs are free (distinct GPU indexes
  per node); one more than fits pends with reason ``Resources``.
- ``gres-oversized``: a job asking for more GPUs than any node has is refused at submit or pends
  with a reason that says it can never run.
- ``preempt-requeue``: a high-tier partition job preempts a low-tier one, which is requeued
  (``Restarts>=1``) and later completes.
- ``gpu-quota``: an account with ``GrpTRES=gres/gpu=Q`` runs Q GPUs and pends the next job with
  ``AssocGrpGRES`` while GPUs are free elsewhere (needs accounting).
- ``drain-on-fault``: a GPU fault injected on a node (``inject_fault``) makes gpu-health drain
  the Slurm node of the same name with its reason prefix; new jobs, offered at once and sized to
  the room the node still has, go elsewhere (exactly one pends) and none starts there while Slurm
  shows that drain unbroken, before and after its running job finishes (a drain, not a kill); a
  repair may resume it meanwhile. After the fault is cleared (``clear_fault``) it is resumed.
  See :mod:`.drain`.
- ``manual-drain-kept``: a node drained by hand with another reason stays drained, reason
  intact, through a fault and its repair; the same fault on a control node must be drained and
  resumed by gpu-health meanwhile, proving the controller saw it. An injected fault is cleared
  whenever a case ends, failed or not.

Params (all optional): ``low_partition``, ``high_partition``, ``inject_fault`` (the fault
injector every suite shares: ``inject_fault(node, kind, **kw)``, e.g. the sim's), ``fault``
(``{"kind": …, **kw}`` passed to it; default ``{"kind": "xid", "code": 48}``), ``clear_fault``
(``clear_fault(node)``; default ``inject_fault(node, "clear")``), ``drain_reason_prefix``
(default ``gpu-health:``, gpu-health's own), ``drain_timeout`` (s), ``requeue_timeout`` (s),
``observe_s`` (s). Without ``inject_fault`` the two drain cases are skipped.
If slurmctld dies, every remaining case fails at once with that cause.
"""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Callable
from typing import Any

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.slurm import cli as slurm_cli
from gpucatalog.validators.conformance.slurm import drain as slurm_drain
from gpucatalog.validators.conformance.slurm import steps as slurm_steps

NAME = "slurm"
LONG = slurm_steps.LONG
# Runs until preempted once, then finishes: proves the requeued job really restarted.
ONCE = 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then exit 0; fi; sleep 600'
NEVER_RUNS = ("BadConstraints", "PartitionConfig", "ReqNodeNotAvail", "PartitionNodeLimit")


def run(ctx: base.SuiteContext) -> base.SuiteResult:
    slurm = slurm_cli.Slurm(ctx.endpoints.get("slurm_conf"))
    state: dict[str, Any] = {"down": None}

    def guard(fn: Callable[[base.SuiteContext, base.CaseResult, slurm_cli.Slurm], None]) -> Callable[[base.SuiteContext, base.CaseResult], None]:
        def case(c: base.SuiteContext, res: base.CaseResult) -> None:
            if state["down"] is not None:
                raise slurm_cli.ControllerDown(state["down"])
            submitted: list[str] = []
            res.details["jobs"] = submitted
            try:
                fn(c, res, slurm)
            except slurm_cli.ControllerDown as exc:
                state["down"] = str(exc)
                raise
            finally:
                if state["down"] is None:
                    slurm.cancel(submitted)
        return case

    fns = [_controller, _gres_placement, _gres_oversized, _preempt_requeue, _gpu_quota, slurm_drain.drain_on_fault,
           slurm_drain.manual_drain_kept]
    return base.run_cases(NAME, ctx, [(n, guard(fn)) for n, fn in zip(CASE_NAMES, fns, strict=True)])


# The cases, in run order (conformance mappings name them as ``slurm/<case>``).
CASE_NAMES = ("controller", "gres-placement", "gres-oversized", "preempt-requeue", "gpu-quota", "drain-on-fault",
              "manual-drain-kept")


# -- helpers ----------------------------------------------------------------------------------


def _indexes(spec: str) -> set[int]:
    """``gpu:h100:4(IDX:0-1,4-5)`` -> {0, 1, 4, 5}."""
    if "IDX:" not in spec:
        return set()
    out: set[int] = set()
    for part in spec.split("IDX:", 1)[1].rstrip(")").split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


# -- cases ------------------------------------------------------------------------------------


def _controller(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    slurm.raise_if_controller_down("first contact")
    nodes = slurm.nodes()
    res.details["nodes"] = {n.name: f"{n.state} gpu:{n.gpu_type}:{n.gpus}" for n in nodes.values()}
    no_gpu = [n.name for n in nodes.values() if n.gpus == 0]
    if not nodes or no_gpu:
        raise base.CaseFailed(f"nodes without gpu gres: {no_gpu or 'no nodes at all'}")


def _gres_placement(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    low, _ = slurm_steps.partitions(ctx, slurm)
    nodes = slurm_steps.gpu_nodes(slurm, low)
    per_job = max(1, min(n.gpus for n in nodes) // 2)
    fits = sum(n.gpus // per_job for n in nodes)
    jobs = slurm_steps.jobs(res)
    for _ in range(fits):
        jobs.append(slurm.sbatch("-p", low, f"--gres=gpu:{per_job}", wrap=LONG))
    running = [slurm_steps.wait_job(ctx, slurm, j, ("RUNNING",), 30) for j in jobs]
    extra = slurm.sbatch("-p", low, f"--gres=gpu:{per_job}", wrap=LONG)
    jobs.append(extra)
    used: dict[str, set[int]] = {}
    for j in running:
        for node, spec in j.gres_idx.items():
            idx = _indexes(spec)
            if used.setdefault(node, set()) & idx:
                raise base.CaseFailed(f"job {j.id} got GPUs {sorted(idx)} on {node}, already given to another job")
            used[node] |= idx
    capacity = {n.name: n.gpus for n in nodes}
    over = {n: len(i) for n, i in used.items() if len(i) > capacity.get(n, 0)}
    if over:
        raise base.CaseFailed(f"more GPUs allocated than the node has: {over}")
    res.details["placement"] = {n: sorted(i) for n, i in used.items()}
    base.wait_for(f"job {extra} to pend with reason Resources", lambda: slurm.job(extra).reason == "Resources", ctx.scaled(15))
    j = slurm.job(extra)
    if j.state != "PENDING":
        raise base.CaseFailed(f"job {extra} beyond the free GPUs is {j.state}, expected PENDING")


def _gres_oversized(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    low, _ = slurm_steps.partitions(ctx, slurm)
    most = max(n.gpus for n in slurm_steps.gpu_nodes(slurm, low))
    job_id, err = slurm.sbatch_try("-p", low, "-N", "1", f"--gres=gpu:{most + 1}", wrap="true")
    if job_id is None:
        res.details["refused"] = err
        if "Requested node configuration is not available" not in err:
            raise base.CaseFailed(f"sbatch refused gpu:{most + 1} for an unexpected reason: {err}")
        return
    slurm_steps.jobs(res).append(job_id)
    time.sleep(2)
    j = slurm.job(job_id)
    res.details["pending_reason"] = j.reason
    if j.state != "PENDING" or j.reason not in NEVER_RUNS:
        raise base.CaseFailed(f"job asking gpu:{most + 1} (node max {most}) is {j.state} reason {j.reason}, expected PENDING with one of {NEVER_RUNS}")


def _preempt_requeue(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    low, high = slurm_steps.partitions(ctx, slurm)
    tiers = slurm.partitions()
    if tiers[low] >= tiers[high]:
        raise base.CaseFailed(f"no two partitions with different PriorityTier (have {tiers})")
    shared = [n for n in slurm_steps.gpu_nodes(slurm, low) if high in n.partitions]
    if not shared:
        raise base.CaseFailed(f"no GPU node is in both {low} and {high}")
    node = shared[0]
    jobs = slurm_steps.jobs(res)
    victim = slurm.sbatch("-p", low, "-w", node.name, "--requeue", f"--gres=gpu:{node.gpus}", wrap=ONCE)
    jobs.append(victim)
    slurm_steps.wait_job(ctx, slurm, victim, ("RUNNING",), 30)
    t0 = time.monotonic()
    urgent = slurm.sbatch("-p", high, "-w", node.name, f"--gres=gpu:{node.gpus}", wrap="sleep 2")
    jobs.append(urgent)
    slurm_steps.wait_job(ctx, slurm, urgent, ("RUNNING", "COMPLETING", "COMPLETED"), 30)
    res.details["preempt_start_s"] = round(time.monotonic() - t0, 2)
    base.wait_for(f"job {victim} to be requeued", lambda: slurm.job(victim).restarts >= 1, ctx.scaled(30))
    done = slurm_steps.wait_job(ctx, slurm, victim, ("COMPLETED",), float(ctx.params.get("requeue_timeout", 240)))
    res.details["victim_restarts"] = done.restarts
    res.details["requeue_complete_s"] = round(time.monotonic() - t0, 2)


def _gpu_quota(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    low, _ = slurm_steps.partitions(ctx, slurm)
    nodes = slurm_steps.gpu_nodes(slurm, low)
    if len(nodes) < 1:
        raise base.CaseFailed("no GPU node")
    quota = max(1, nodes[0].gpus // 2)
    account = f"cq{os.getpid()}"
    user = getpass.getuser()
    try:
        slurm.run(["sacctmgr", "-i", "add", "account", account, "Description=conformance GPU quota"])
    except base.CaseFailed as exc:
        raise base.CaseFailed(f"accounting is not available, a GPU quota cannot be enforced: {exc}") from None
    try:
        slurm.run(["sacctmgr", "-i", "add", "user", user, f"account={account}"])
        slurm.run(["sacctmgr", "-i", "modify", "account", account, "set", f"GrpTRES=gres/gpu={quota}"])
        jobs = slurm_steps.jobs(res)
        # slurmdbd pushes the new association to slurmctld asynchronously: retry until accepted.
        first = base.wait_for(
            f"account {account} to be usable",
            lambda: slurm.sbatch_try("-p", low, "-A", account, f"--gres=gpu:{quota}", wrap=LONG)[0],
            ctx.scaled(20),
        )
        jobs.append(first)
        slurm_steps.wait_job(ctx, slurm, first, ("RUNNING",), 30)
        over = slurm.sbatch("-p", low, "-A", account, "--gres=gpu:1", wrap=LONG)
        jobs.append(over)
        control = slurm.sbatch("-p", low, "--gres=gpu:1", wrap=LONG)
        jobs.append(control)
        slurm_steps.wait_job(ctx, slurm, control, ("RUNNING",), 30)
        base.wait_for(f"job {over} to pend on the account's GPU limit", lambda: slurm.job(over).reason == "AssocGrpGRES", ctx.scaled(15))
        j = slurm.job(over)
        res.details.update(quota=quota, over_reason=j.reason)
        if j.state != "PENDING":
            raise base.CaseFailed(f"job {over} over the account's gres/gpu={quota} is {j.state}")
    finally:
        slurm.cancel(slurm_steps.jobs(res))
        slurm_steps.jobs(res).clear()
        slurm.run(["sacctmgr", "-i", "delete", "user", user, f"account={account}"], check=False)
        slurm.run(["sacctmgr", "-i", "delete", "account", account], check=False)
