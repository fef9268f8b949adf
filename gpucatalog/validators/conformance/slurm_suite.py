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
  the Slurm node of the same name with its reason prefix; the running job finishes, then with
  the node idle no new job lands there (one whole-node job per node: exactly one pends); after
  the fault is cleared (``clear_fault``) and verified the node is resumed.
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

import contextlib
import getpass
import os
import time
from collections.abc import Callable
from typing import Any

from gpucatalog.validators.conformance import base, slurm_cli

NAME = "slurm"
LONG = "sleep 600"
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

    fns = [_controller, _gres_placement, _gres_oversized, _preempt_requeue, _gpu_quota, _drain_on_fault,
           _manual_drain_kept]
    return base.run_cases(NAME, ctx, [(n, guard(fn)) for n, fn in zip(CASE_NAMES, fns, strict=True)])


# The cases, in run order (conformance mappings name them as ``slurm/<case>``).
CASE_NAMES = ("controller", "gres-placement", "gres-oversized", "preempt-requeue", "gpu-quota", "drain-on-fault",
              "manual-drain-kept")


# -- helpers ----------------------------------------------------------------------------------


def _jobs(res: base.CaseResult) -> list[str]:
    jobs: list[str] = res.details["jobs"]
    return jobs


def _wait_job(ctx: base.SuiteContext, slurm: slurm_cli.Slurm, job_id: str, states: tuple[str, ...], timeout: float) -> slurm_cli.Job:
    def probe() -> slurm_cli.Job | None:
        j = slurm.job(job_id)
        return j if j.state in states else None

    try:
        return base.wait_for(f"job {job_id} to be {'/'.join(states)}", probe, ctx.scaled(timeout))
    except base.CaseFailed:
        slurm.raise_if_controller_down(f"waiting for job {job_id}")
        j = slurm.job(job_id)
        raise base.CaseFailed(f"job {job_id} is {j.state} (reason {j.reason}), expected {'/'.join(states)} within {timeout:.0f}s") from None


def _partitions(ctx: base.SuiteContext, slurm: slurm_cli.Slurm) -> tuple[str, str]:
    tiers = slurm.partitions()
    if not tiers:
        raise base.CaseFailed("the cluster has no partitions")
    low = str(ctx.params.get("low_partition") or min(tiers, key=lambda p: tiers[p]))
    high = str(ctx.params.get("high_partition") or max(tiers, key=lambda p: tiers[p]))
    return low, high


def _gpu_nodes(slurm: slurm_cli.Slurm, partition: str) -> list[slurm_cli.Node]:
    nodes = [n for n in slurm.nodes().values() if partition in n.partitions and n.gpus > 0 and not n.drained]
    if not nodes:
        raise base.CaseFailed(f"partition {partition} has no schedulable GPU node")
    return sorted(nodes, key=lambda n: n.name)


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
    low, _ = _partitions(ctx, slurm)
    nodes = _gpu_nodes(slurm, low)
    per_job = max(1, min(n.gpus for n in nodes) // 2)
    fits = sum(n.gpus // per_job for n in nodes)
    jobs = _jobs(res)
    for _ in range(fits):
        jobs.append(slurm.sbatch("-p", low, f"--gres=gpu:{per_job}", wrap=LONG))
    running = [_wait_job(ctx, slurm, j, ("RUNNING",), 30) for j in jobs]
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
    low, _ = _partitions(ctx, slurm)
    most = max(n.gpus for n in _gpu_nodes(slurm, low))
    job_id, err = slurm.sbatch_try("-p", low, "-N", "1", f"--gres=gpu:{most + 1}", wrap="true")
    if job_id is None:
        res.details["refused"] = err
        if "Requested node configuration is not available" not in err:
            raise base.CaseFailed(f"sbatch refused gpu:{most + 1} for an unexpected reason: {err}")
        return
    _jobs(res).append(job_id)
    time.sleep(2)
    j = slurm.job(job_id)
    res.details["pending_reason"] = j.reason
    if j.state != "PENDING" or j.reason not in NEVER_RUNS:
        raise base.CaseFailed(f"job asking gpu:{most + 1} (node max {most}) is {j.state} reason {j.reason}, expected PENDING with one of {NEVER_RUNS}")


def _preempt_requeue(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    low, high = _partitions(ctx, slurm)
    tiers = slurm.partitions()
    if tiers[low] >= tiers[high]:
        raise base.CaseFailed(f"no two partitions with different PriorityTier (have {tiers})")
    shared = [n for n in _gpu_nodes(slurm, low) if high in n.partitions]
    if not shared:
        raise base.CaseFailed(f"no GPU node is in both {low} and {high}")
    node = shared[0]
    jobs = _jobs(res)
    victim = slurm.sbatch("-p", low, "-w", node.name, "--requeue", f"--gres=gpu:{node.gpus}", wrap=ONCE)
    jobs.append(victim)
    _wait_job(ctx, slurm, victim, ("RUNNING",), 30)
    t0 = time.monotonic()
    urgent = slurm.sbatch("-p", high, "-w", node.name, f"--gres=gpu:{node.gpus}", wrap="sleep 2")
    jobs.append(urgent)
    _wait_job(ctx, slurm, urgent, ("RUNNING", "COMPLETING", "COMPLETED"), 30)
    res.details["preempt_start_s"] = round(time.monotonic() - t0, 2)
    base.wait_for(f"job {victim} to be requeued", lambda: slurm.job(victim).restarts >= 1, ctx.scaled(30))
    done = _wait_job(ctx, slurm, victim, ("COMPLETED",), float(ctx.params.get("requeue_timeout", 240)))
    res.details["victim_restarts"] = done.restarts
    res.details["requeue_complete_s"] = round(time.monotonic() - t0, 2)


def _gpu_quota(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    low, _ = _partitions(ctx, slurm)
    nodes = _gpu_nodes(slurm, low)
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
        jobs = _jobs(res)
        # slurmdbd pushes the new association to slurmctld asynchronously: retry until accepted.
        first = base.wait_for(
            f"account {account} to be usable",
            lambda: slurm.sbatch_try("-p", low, "-A", account, f"--gres=gpu:{quota}", wrap=LONG)[0],
            ctx.scaled(20),
        )
        jobs.append(first)
        _wait_job(ctx, slurm, first, ("RUNNING",), 30)
        over = slurm.sbatch("-p", low, "-A", account, "--gres=gpu:1", wrap=LONG)
        jobs.append(over)
        control = slurm.sbatch("-p", low, "--gres=gpu:1", wrap=LONG)
        jobs.append(control)
        _wait_job(ctx, slurm, control, ("RUNNING",), 30)
        base.wait_for(f"job {over} to pend on the account's GPU limit", lambda: slurm.job(over).reason == "AssocGrpGRES", ctx.scaled(15))
        j = slurm.job(over)
        res.details.update(quota=quota, over_reason=j.reason)
        if j.state != "PENDING":
            raise base.CaseFailed(f"job {over} over the account's gres/gpu={quota} is {j.state}")
    finally:
        slurm.cancel(_jobs(res))
        _jobs(res).clear()
        slurm.run(["sacctmgr", "-i", "delete", "user", user, f"account={account}"], check=False)
        slurm.run(["sacctmgr", "-i", "delete", "account", account], check=False)


def _fault_hooks(ctx: base.SuiteContext, res: base.CaseResult) -> tuple[Callable[[str], None], Callable[[str], None]] | None:
    """(inject one fault on a node, clear a node's faults) from the params; without an injector
    the case is marked skipped and None returned."""
    inject, clear = ctx.params.get("inject_fault"), ctx.params.get("clear_fault")
    if not callable(inject):
        res.result = "skipped"
        res.reason = "no inject_fault/clear_fault in the suite params"
        return None
    fault = dict(ctx.params.get("fault") or {"kind": "xid", "code": 48})
    kind = str(fault.pop("kind", "xid"))

    def do_inject(node: str) -> None:
        inject(node, kind, **fault)

    def do_clear(node: str) -> None:
        if callable(clear):
            clear(node)
        else:
            inject(node, "clear")

    return do_inject, do_clear


def _node(slurm: slurm_cli.Slurm, name: str) -> slurm_cli.Node:
    return slurm.nodes()[name]


def _new_work_avoids(ctx: base.SuiteContext, slurm: slurm_cli.Slurm, low: str, nodes: list[slurm_cli.Node],
                     target: slurm_cli.Node, jobs: list[str]) -> dict[str, str]:
    """Whole-node jobs, one per GPU node, on an otherwise idle partition: every other node takes
    one, the drained ``target`` takes none, so exactly one pends. Had ``target`` not been
    drained it would have taken one: the check can fail. Returns job -> where it is."""
    mine = [slurm.sbatch("-p", low, f"--gres=gpu:{target.gpus}", "-N", "1", wrap=LONG) for _ in nodes]
    jobs.extend(mine)
    others = len(nodes) - 1
    base.wait_for(f"{others} whole-node jobs running on the nodes other than {target.name}",
                  lambda: sum(1 for j in mine if slurm.job(j).state == "RUNNING") >= others, ctx.scaled(30))
    time.sleep(2)  # time for the scheduler to (wrongly) start the last one on the target
    where = {j: slurm.job(j).nodes or slurm.job(j).state for j in mine}
    on_target = [j for j in mine if target.name in slurm.job(j).nodes.split(",")]
    if on_target:
        raise base.CaseFailed(f"job(s) {', '.join(on_target)} started on drained node {target.name}")
    pending = [j for j in mine if slurm.job(j).state == "PENDING"]
    if len(pending) != 1:
        raise base.CaseFailed(f"expected exactly one whole-node job left pending (the drained node's share), got {where}")
    return where


def _drain_on_fault(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    hooks = _fault_hooks(ctx, res)
    if hooks is None:
        return
    inject, clear = hooks
    prefix = str(ctx.params.get("drain_reason_prefix", "gpu-health:"))
    timeout = float(ctx.params.get("drain_timeout", 60))
    low, _ = _partitions(ctx, slurm)
    nodes = _gpu_nodes(slurm, low)
    if len(nodes) < 2:
        raise base.CaseFailed("drain-on-fault needs two GPU nodes (one to drain, one to take new jobs)")
    target = nodes[0]
    res.details["node"] = target.name
    jobs = _jobs(res)
    running = slurm.sbatch("-p", low, "-w", target.name, "--gres=gpu:1", wrap="sleep 8")
    jobs.append(running)
    _wait_job(ctx, slurm, running, ("RUNNING",), 30)
    t0 = time.monotonic()
    inject(target.name)
    cleared = False
    try:
        def drained_by_controller() -> slurm_cli.Node | None:
            n = _node(slurm, target.name)
            return n if n.drained and n.reason.startswith(prefix) else None

        drained = base.wait_for(f"{target.name} to be drained with a reason starting {prefix!r}",
                                drained_by_controller, ctx.scaled(timeout))
        res.details["drain_latency_s"] = round(time.monotonic() - t0, 3)
        res.details["reason"] = drained.reason
        # The running job finishes on the drained node (a drain, not a kill) ...
        done = _wait_job(ctx, slurm, running, ("COMPLETED",), 60)
        res.details["running_job"] = "requeued" if done.restarts else "finished"
        # ... and only then is new work offered, so the target has room and must still refuse it.
        res.details["new_jobs"] = _new_work_avoids(ctx, slurm, low, nodes, target, jobs)
        slurm.cancel(jobs)
        t1 = time.monotonic()
        clear(target.name)
        cleared = True
        base.wait_for(f"{target.name} to be resumed after the fault cleared",
                      lambda: not _node(slurm, target.name).drained, ctx.scaled(timeout))
        res.details["resume_latency_s"] = round(time.monotonic() - t1, 3)
    finally:
        if not cleared:
            clear(target.name)  # a case that failed midway leaves no fault behind


def _manual_drain_kept(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    """A hand-drained node keeps its drain and reason through a fault and its repair. The same
    fault goes to a control node at the same moment: only once gpu-health has drained the control
    node is it shown to have seen the fault, so a controller that is down cannot pass this case."""
    hooks = _fault_hooks(ctx, res)
    if hooks is None:
        return
    inject, clear = hooks
    prefix = str(ctx.params.get("drain_reason_prefix", "gpu-health:"))
    timeout = float(ctx.params.get("drain_timeout", 60))
    low, _ = _partitions(ctx, slurm)
    nodes = _gpu_nodes(slurm, low)
    if len(nodes) < 2:
        raise base.CaseFailed("manual-drain-kept needs two GPU nodes (the hand-drained one and a control)")
    # The control is not drain-on-fault's node where there is a third: each node then sees one
    # fault per run, far from gpu-health's flap threshold.
    target, control = nodes[-1], nodes[1 if len(nodes) > 2 else 0]
    res.details.update(node=target.name, control=control.name)
    reason = f"ops: hand drain by conformance {os.getpid()}"
    slurm.drain(target.name, reason)
    injected: list[str] = []
    try:
        # The control's fault first: a controller that repairs one node at a time must not have the
        # hand-drained node's repair ahead of the control's drain.
        inject(control.name)
        injected.append(control.name)
        base.wait_for(f"gpu-health to drain the control node {control.name} (proof it saw this fault)",
                      lambda: (lambda c: c.drained and c.reason.startswith(prefix))(_node(slurm, control.name)),
                      ctx.scaled(timeout))
        inject(target.name)
        injected.append(target.name)
        n = _node(slurm, target.name)
        if not n.drained or not n.reason.startswith(reason):
            raise base.CaseFailed(f"{target.name}, drained by hand ({reason!r}), is now {n.state} {n.reason!r} "
                                  "after the fault")
        for name in injected:
            clear(name)
        injected.clear()
        base.wait_for(f"gpu-health to resume the control node {control.name} after the repair",
                      lambda: not _node(slurm, control.name).drained, ctx.scaled(timeout))
        time.sleep(float(ctx.params.get("observe_s", 3)))
        n = _node(slurm, target.name)
        res.details["reason_after"] = n.reason
        if not n.drained:
            raise base.CaseFailed(f"{target.name}, drained by hand ({reason!r}), was resumed by the controller")
        if not n.reason.startswith(reason):
            raise base.CaseFailed(f"{target.name}'s hand-drain reason was replaced by {n.reason!r}")
    finally:
        for name in injected:
            # a case that failed midway leaves no fault behind; where a clear cannot be done (the pod
            # injector on a real node) the case is not run already, and the hand drain is still undone
            with contextlib.suppress(base.CaseNotRun):
                clear(name)
        # Undo our hand drain; check=False: the node may already be (wrongly) resumed.
        slurm.resume(target.name, check=False)
