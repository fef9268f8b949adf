"""The ``slurm`` suite's two drain cases, ``drain-on-fault`` and ``manual-drain-kept``, and the
fault hooks they share. Called by :mod:`.suite` (which runs them in its guard).

``drain-on-fault`` judges its claim from Slurm's own state. A repair may return the node at any
moment (gpu-health repairs XID 48 with a GPU reset, which on the sim clears the fault, and
resumes the node seconds after the drain), so "no new job there" can only mean "none starts
while Slurm has the node drained". Each look reads the case's jobs first and the target
afterwards: when the target still carries the drain the case saw set, with the same reason
timestamp (``Node.reason_time``, which a resume clears and a new drain replaces), that drain
held, unbroken, from before the jobs were submitted until after they were read, so a job of the
case found on the target started on a drained node. A job found there only after the drain was
lifted is a placement after the resume, recorded, not judged (to within one look, 0.5 s).
New work is offered as soon as the drain is seen, sized to the room the target still has beside
its running 1-GPU job, so the target could take one and must refuse it. That job must still be
running then (a drain, not a kill); the case then tells it to finish (``scancel --batch
--signal=USR1``) and looks on while the idle node stays drained.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.slurm import cli as slurm_cli
from gpucatalog.validators.conformance.slurm import steps as slurm_steps

LOOK_S = 0.5
SETTLE_S = 2.0  # scheduling passes after the other nodes' jobs started, for one to (wrongly) start on the target
# Runs until the case signals it, then exits 0: it ends when the case has judged the new work,
# however long the fault took to inject (a pod injector takes seconds), never before the drain.
RUNNING_JOB = "trap 'exit 0' USR1; sleep 600 & wait"


def fault_hooks(ctx: base.SuiteContext, res: base.CaseResult) -> tuple[Callable[[str], None], Callable[[str], None]] | None:
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


class DrainWatch:
    """Looks at the case's new jobs and the drained target; fails on a job started there while
    the drain first seen (``mark``) held. ``held`` turns False for good once the drain is lifted."""

    def __init__(self, slurm: slurm_cli.Slurm, target: str, mark: str, mine: list[str]) -> None:
        self.slurm, self.target, self.mark, self.mine = slurm, target, mark, mine
        self.held = True
        self.looks = 0
        self.seen: dict[str, slurm_cli.Job] = {}
        self.after_resume: dict[str, str] = {}  # job -> its StartTime, placed on the target after the resume

    def look(self) -> bool:
        """One look (jobs, then the target); returns whether the drain still held after it."""
        self.seen = {j: self.slurm.job(j) for j in self.mine}
        node = _node(self.slurm, self.target)
        on_target = {j: job.start for j, job in self.seen.items() if self.target in job.nodes.split(",")}
        self.looks += 1
        if self.held and node.drained and node.reason_time == self.mark:
            if on_target:
                starts = ", ".join(f"{j} at {s}" for j, s in on_target.items())
                raise base.CaseFailed(f"job(s) {starts} started on drained node {self.target} (drained since "
                                      f"{self.mark}, still drained with reason {node.reason!r})")
            return True
        self.held = False
        for j, start in on_target.items():
            self.after_resume.setdefault(j, start)
        return False

    def where(self) -> dict[str, str]:
        return {j: job.nodes or job.state for j, job in self.seen.items()}

    def running_elsewhere(self) -> int:
        return sum(1 for job in self.seen.values() if job.state == "RUNNING" and self.target not in job.nodes.split(","))


def new_work_refused(ctx: base.SuiteContext, slurm: slurm_cli.Slurm, low: str, nodes: list[slurm_cli.Node],
                     target: slurm_cli.Node, mark: str, free: int, jobs: list[str]) -> DrainWatch:
    """Jobs of ``free`` GPUs each (what the drained target still has room for), one more than the
    other nodes hold: every other node fills, the target takes none, so exactly one pends while
    the drain holds. Had the target not been drained it would have taken that one."""
    others = sum(n.gpus // free for n in nodes if n.name != target.name)
    mine = [slurm.sbatch("-p", low, f"--gres=gpu:{free}", "-N", "1", wrap=slurm_steps.LONG) for _ in range(others + 1)]
    jobs.extend(mine)
    watch = DrainWatch(slurm, target.name, mark, mine)
    deadline = time.monotonic() + ctx.scaled(30)
    while watch.look() and watch.running_elsewhere() < others:
        if time.monotonic() >= deadline:
            raise base.CaseFailed(f"only {watch.running_elsewhere()} of {others} jobs of gpu:{free} started on the "
                                  f"nodes other than {target.name} within 30s: {watch.where()}")
        time.sleep(LOOK_S)
    if not watch.held:
        raise base.CaseNotRun(
            f"{target.name} was resumed (its drain of {mark} lifted) before Slurm had placed the new work "
            f"({watch.where()}): a repair faster than a scheduling pass, so the drain's effect on new jobs was "
            "not observed; run again, or set a `fault` whose repair takes longer")
    settle = time.monotonic() + SETTLE_S
    while time.monotonic() < settle and watch.look():
        time.sleep(LOOK_S)
    if watch.held:
        pending = [j for j, job in watch.seen.items() if job.state == "PENDING"]
        if len(pending) != 1:
            raise base.CaseFailed(f"expected exactly one job of gpu:{free} left pending (the drained node's share), "
                                  f"got {watch.where()}")
    return watch


def _finish_watched(ctx: base.SuiteContext, slurm: slurm_cli.Slurm, running: str, watch: DrainWatch) -> slurm_cli.Job:
    """The running job is still running on the drained node (a drain, not a kill); told to finish,
    it completes; the looks go on all along and for SETTLE_S after it (the target then idle, room
    for any job): no new job may start there while the drain holds."""
    job = slurm.job(running)
    if job.state != "RUNNING" or job.restarts:
        raise base.CaseFailed(f"job {running}, running on {watch.target} before the fault, is {job.state} "
                              f"(reason {job.reason}, restarts {job.restarts}): a drain lets running work finish")
    slurm.signal_batch(running, "USR1")
    deadline = time.monotonic() + ctx.scaled(30)
    idle_until: float | None = None
    while True:
        watch.look()
        job = slurm.job(running)
        if job.state == "COMPLETED":
            idle_until = idle_until or time.monotonic() + SETTLE_S
            if time.monotonic() >= idle_until:
                return job
        elif time.monotonic() >= deadline:
            slurm.raise_if_controller_down(f"waiting for job {running}")
            raise base.CaseFailed(f"job {running} on the drained node, told to finish, is {job.state} (reason "
                                  f"{job.reason}), expected COMPLETED within 30s")
        time.sleep(LOOK_S)


def drain_on_fault(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    hooks = fault_hooks(ctx, res)
    if hooks is None:
        return
    inject, clear = hooks
    prefix = str(ctx.params.get("drain_reason_prefix", "gpu-health:"))
    timeout = float(ctx.params.get("drain_timeout", 60))
    low, _ = slurm_steps.partitions(ctx, slurm)
    nodes = slurm_steps.gpu_nodes(slurm, low)
    if len(nodes) < 2:
        raise base.CaseFailed("drain-on-fault needs two GPU nodes (one to drain, one to take new jobs)")
    target = nodes[0]
    if target.gpus < 2:
        raise base.CaseFailed(f"drain-on-fault needs {target.name} to have 2+ GPUs (one busy, the rest offered)")
    res.details["node"] = target.name
    jobs = slurm_steps.jobs(res)
    running = slurm.sbatch("-p", low, "-w", target.name, "--gres=gpu:1", wrap=RUNNING_JOB)
    jobs.append(running)
    slurm_steps.wait_job(ctx, slurm, running, ("RUNNING",), 30)
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
        res.details.update(reason=drained.reason, drained_at=drained.reason_time)
        if not drained.reason_time:
            raise base.CaseFailed(f"Slurm gives no time for {target.name}'s drain reason (sinfo %H): this drain "
                                  "cannot be told apart from a later one")
        # New work at once, while the drain surely holds: the target has room beside its running job.
        watch = new_work_refused(ctx, slurm, low, nodes, target, drained.reason_time, target.gpus - 1, jobs)
        res.details["new_jobs"] = watch.where()
        ctx.log(f"slurm/drain-on-fault: new work refused by drained {target.name}")
        # The running job finishes on the drained node (a drain, not a kill); meanwhile, and after
        # it while the node is idle, no job starts there as long as the drain holds.
        _finish_watched(ctx, slurm, running, watch)
        res.details["running_job"] = "finished"
        res.details.update(drain_held_to_end=watch.held, looks=watch.looks, started_after_resume=watch.after_resume)
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


def manual_drain_kept(ctx: base.SuiteContext, res: base.CaseResult, slurm: slurm_cli.Slurm) -> None:
    """A hand-drained node keeps its drain and reason through a fault and its repair. The same
    fault goes to a control node at the same moment: only once gpu-health has drained the control
    node is it shown to have seen the fault, so a controller that is down cannot pass this case."""
    hooks = fault_hooks(ctx, res)
    if hooks is None:
        return
    inject, clear = hooks
    prefix = str(ctx.params.get("drain_reason_prefix", "gpu-health:"))
    timeout = float(ctx.params.get("drain_timeout", 60))
    low, _ = slurm_steps.partitions(ctx, slurm)
    nodes = slurm_steps.gpu_nodes(slurm, low)
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
