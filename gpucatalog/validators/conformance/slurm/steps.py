"""Steps the ``slurm`` suite's cases share: a case's own job list, waiting for a job's state, and
picking partitions and schedulable GPU nodes. Called by :mod:`.suite` and :mod:`.drain`.
"""

from __future__ import annotations

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.slurm import cli as slurm_cli

LONG = "sleep 600"


def jobs(res: base.CaseResult) -> list[str]:
    """The case's submitted jobs (the suite cancels them whenever the case ends)."""
    out: list[str] = res.details["jobs"]
    return out


def wait_job(ctx: base.SuiteContext, slurm: slurm_cli.Slurm, job_id: str, states: tuple[str, ...], timeout: float) -> slurm_cli.Job:
    def probe() -> slurm_cli.Job | None:
        j = slurm.job(job_id)
        return j if j.state in states else None

    try:
        return base.wait_for(f"job {job_id} to be {'/'.join(states)}", probe, ctx.scaled(timeout))
    except base.CaseFailed:
        slurm.raise_if_controller_down(f"waiting for job {job_id}")
        j = slurm.job(job_id)
        raise base.CaseFailed(f"job {job_id} is {j.state} (reason {j.reason}), expected {'/'.join(states)} within {timeout:.0f}s") from None


def partitions(ctx: base.SuiteContext, slurm: slurm_cli.Slurm) -> tuple[str, str]:
    """(low, high): the ``low_partition``/``high_partition`` params, else the lowest and highest PriorityTier."""
    tiers = slurm.partitions()
    if not tiers:
        raise base.CaseFailed("the cluster has no partitions")
    low = str(ctx.params.get("low_partition") or min(tiers, key=lambda p: tiers[p]))
    high = str(ctx.params.get("high_partition") or max(tiers, key=lambda p: tiers[p]))
    return low, high


def gpu_nodes(slurm: slurm_cli.Slurm, partition: str) -> list[slurm_cli.Node]:
    """The partition's GPU nodes not drained, by name."""
    nodes = [n for n in slurm.nodes().values() if partition in n.partitions and n.gpus > 0 and not n.drained]
    if not nodes:
        raise base.CaseFailed(f"partition {partition} has no schedulable GPU node")
    return sorted(nodes, key=lambda n: n.name)
