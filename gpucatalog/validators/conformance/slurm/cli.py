"""Slurm's command line, as the ``slurm`` conformance suite uses it.

Every call carries ``SLURM_CONF`` from the suite context and a timeout, so a dead or hung
slurmctld fails the case with that cause instead of hanging the suite: when a command fails,
``scontrol ping`` decides whether the controller is the reason. Talks to Slurm only through
sbatch/squeue/scontrol/sinfo/sacctmgr, so it works against any Slurm cluster (Slinky's too).
Called by :mod:`.suite` and its case modules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpucatalog.core import errors, executor
from gpucatalog.validators.conformance.kit.base import CaseFailed

CMD_TIMEOUT = 30.0


class ControllerDown(CaseFailed):
    """slurmctld does not answer: every later step would fail for the same reason."""


@dataclass(frozen=True)
class Node:
    name: str
    state: str  # sinfo's long state, e.g. idle, mixed, drained, draining
    gpus: int
    gpu_type: str
    reason: str
    partitions: tuple[str, ...]
    # when the current reason was set (sinfo %H), Slurm's own record: a resume clears it and a
    # new drain sets a new one, so one drain seen twice with the same mark held unbroken between
    reason_time: str = ""

    @property
    def drained(self) -> bool:
        return self.state.startswith(("drain", "drng"))


@dataclass(frozen=True)
class Job:
    id: str
    state: str
    reason: str
    nodes: str
    restarts: int
    partition: str
    gres_idx: dict[str, str]  # node -> "gpu:h100:4(IDX:0-3)"
    start: str = ""  # StartTime, slurmctld's clock (for a pending job, its expected start)


class Slurm:
    def __init__(self, slurm_conf: str | None) -> None:
        self.env = {"SLURM_CONF": slurm_conf} if slurm_conf else {}

    def run(self, argv: Sequence[str], *, check: bool = True) -> str:
        try:
            res = executor.run(list(argv), env=self.env, timeout=CMD_TIMEOUT, check=check)
        except errors.ToolError as exc:
            self.raise_if_controller_down(f"`{' '.join(argv)}` failed")
            raise CaseFailed(f"`{' '.join(argv)}` failed: {exc.stderr.strip()[:300]}") from exc
        return res.stdout

    def ping(self) -> tuple[bool, str]:
        try:
            res = executor.run(["scontrol", "ping"], env=self.env, timeout=CMD_TIMEOUT, check=False)
        except errors.ToolError as exc:
            return False, exc.stderr.strip()
        out = (res.stdout + res.stderr).strip()
        return " is UP" in out, out

    def raise_if_controller_down(self, context: str) -> None:
        up, out = self.ping()
        if not up:
            raise ControllerDown(f"slurmctld is not responding ({context}; scontrol ping: {out or 'no answer'})")

    # -- queries ------------------------------------------------------------------------------

    def nodes(self) -> dict[str, Node]:
        out = self.run(["sinfo", "-h", "-N", "-o", "%N|%T|%G|%P|%H|%E"])
        found: dict[str, Node] = {}
        for line in out.splitlines():
            name, state, gres, part, when, reason = line.split("|", 5)
            part = part.rstrip("*")
            if name in found:
                prev = found[name]
                found[name] = Node(name, prev.state, prev.gpus, prev.gpu_type, prev.reason, prev.partitions + (part,),
                                   prev.reason_time)
                continue
            gpu_type, gpus = parse_gres(gres)
            found[name] = Node(name, state, gpus, gpu_type, "" if reason == "none" else reason, (part,),
                               "" if when == "Unknown" else when)
        return found

    def partitions(self) -> dict[str, int]:
        """Partition name -> PriorityTier."""
        out = self.run(["scontrol", "show", "partition", "-o"])
        tiers: dict[str, int] = {}
        for line in out.splitlines():
            kv = _kv(line)
            if "PartitionName" in kv:
                tiers[kv["PartitionName"]] = int(kv.get("PriorityTier", "1"))
        return tiers

    def job(self, job_id: str) -> Job:
        out = self.run(["scontrol", "show", "job", "-d", "-o", job_id])
        kv = _kv(out)
        gres_idx = {m.group(1): m.group(2) for m in re.finditer(r"Nodes=(\S+) CPU_IDs=\S+ Mem=\S+ GRES=(\S+)", out)}
        return Job(
            id=job_id,
            state=kv.get("JobState", "?"),
            reason=kv.get("Reason", ""),
            nodes=kv.get("NodeList", ""),
            restarts=int(kv.get("Restarts", "0") or 0),
            partition=kv.get("Partition", ""),
            gres_idx=gres_idx,
            start=kv.get("StartTime", ""),
        )

    # -- actions ------------------------------------------------------------------------------

    def sbatch(self, *args: str, wrap: str) -> str:
        return self.run(["sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", wrap]).strip().split(";")[0]

    def sbatch_try(self, *args: str, wrap: str) -> tuple[str | None, str]:
        """Submit; returns (job id, "") or (None, sbatch's error) when Slurm refuses the job."""
        res = executor.run(
            ["sbatch", "--parsable", "--output=/dev/null", *args, "--wrap", wrap],
            env=self.env, timeout=CMD_TIMEOUT, check=False,
        )
        if res.returncode == 0:
            return res.stdout.strip().split(";")[0], ""
        self.raise_if_controller_down("sbatch failed")
        return None, res.stderr.strip()

    def cancel(self, job_ids: Sequence[str]) -> None:
        if job_ids:
            self.run(["scancel", *job_ids], check=False)

    def signal_batch(self, job_id: str, sig: str) -> None:
        """Send ``sig`` to a job's batch script only (the job is not cancelled)."""
        self.run(["scancel", "--batch", f"--signal={sig}", job_id])

    def drain(self, node: str, reason: str) -> None:
        self.run(["scontrol", "update", f"nodename={node}", "state=drain", f"reason={reason}"])

    def resume(self, node: str, *, check: bool = True) -> None:
        self.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=check)


def _kv(line: str) -> dict[str, str]:
    return dict(tok.split("=", 1) for tok in line.split() if "=" in tok)


def parse_gres(gres: str) -> tuple[str, int]:
    """sinfo %G (``gpu:h100:8`` or ``gpu:h100:8(S:0)``, maybe comma-joined) -> (type, count)."""
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            return (parts[1] if len(parts) == 3 else ""), int(parts[-1])
    return "", 0
