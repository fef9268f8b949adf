"""The work a Slurm bundle carries through an upgrade, and the probe that times its scheduling gap.

Work (``SlurmWork``): Slurm jobs that hold GPUs while the upgrade runs — a whole-node job and a
half-node job on the first GPU type's nodes (in the default partition and in the
highest-priority one), a job on the second GPU type's nodes — and one job that cannot start (a
whole node of the first type while none is free). Compared before and after: every running job
keeps its id, state, nodes and restart count; every partition survives with its priority tier
and state as the version it ends on renders them (or as they were, when it does not render
them), and every partition that version renders exists; the pending job starts.

Probes (``SlurmProber``): one single-GPU job at a time on the second GPU type's nodes (which
keep free GPUs, so no probe preempts anything), timed from ``sbatch`` until Slurm reports it
RUNNING.

Called by ``pipelines.upgrade``. Talks only to Slurm's commands (through ``slurm.cli``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpucatalog.core import errors
from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.slurm import cli as slurm_cli
from gpucatalog.validators.conformance.upgrade import probe as upgrade_probe

SLINKY = "slinky.slurm.net/"
SLEEP = "sleep 3600"


def partitions(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Partition name -> its ``PartitionName=`` line's settings, from the rendered Controller."""
    out: dict[str, dict[str, str]] = {}
    for o in objects:
        if o.get("kind") == "Controller" and str(o.get("apiVersion", "")).startswith(SLINKY):
            for line in str((o.get("spec") or {}).get("extraConf") or "").splitlines():
                kv = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
                if "PartitionName" in kv:
                    out[kv["PartitionName"]] = kv
    return out


def gpu_types(objects: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """(GPU type, GPUs per node, nodes) per NodeSet, from ``Gres=gpu:<type>:<n>``."""
    out = []
    for o in objects:
        if o.get("kind") == "NodeSet" and str(o.get("apiVersion", "")).startswith(SLINKY):
            m = re.search(r"Gres=gpu:([^:\s]+):(\d+)", str((o.get("spec") or {}).get("extraConf") or ""))
            if m:
                out.append((m.group(1), int(m.group(2)), int((o.get("spec") or {}).get("replicas") or 0)))
    return out


@dataclass
class Snapshot:
    jobs: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # id -> (state, nodes, restarts)
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> scontrol's settings


class SlurmWork:
    def __init__(self, slurm: slurm_cli.Slurm, objects: list[dict[str, Any]], wait_seconds: float = 120.0) -> None:
        self.slurm, self.wait_seconds = slurm, wait_seconds
        types = gpu_types(objects)
        parts = partitions(objects)
        if len(types) < 2 or types[0][2] < 2 or not parts:
            raise base.CaseFailed("the old version renders fewer than 2 GPU NodeSets (the first with 2 or more nodes) "
                                  "or no partition; the upgrade's workload set needs them")
        (self.t1, self.n1, _), (self.t2, self.n2, _) = types[0], types[1]
        self.default = next((n for n, kv in parts.items() if kv.get("Default") == "YES"), next(iter(parts)))
        self.top = max(parts, key=lambda n: int(parts[n].get("PriorityTier", "1")))
        self.running: dict[str, str] = {}  # job id -> what it is
        self.pending_id = ""

    def describe(self) -> dict[str, Any]:
        return {"jobs": [f"{j} {what}" for j, what in self.running.items()], "pending": self.pending_id}

    def _sbatch(self, part: str, gpus: str) -> str:
        return self.slurm.sbatch(f"--partition={part}", f"--gres=gpu:{gpus}", "-N1", "--job-name=upgrade", wrap=SLEEP)

    def start(self) -> None:
        for part, gpus in ((self.default, f"{self.t1}:{self.n1}"), (self.top, f"{self.t1}:{self.n1 // 2}"),
                           (self.default, f"{self.t2}:{self.n2 // 2}")):
            self.running[self._sbatch(part, gpus)] = f"partition {part} gpu:{gpus}"
        base.wait_for("the upgrade's Slurm jobs to run", lambda: all(
            self.slurm.job(j).state == "RUNNING" for j in self.running), self.wait_seconds, interval=0.5)
        self.pending_id = self._sbatch(self.default, f"{self.t1}:{self.n1}")
        base.holds(f"job {self.pending_id} pending", lambda: self.slurm.job(self.pending_id).state == "PENDING", 3.0)

    def snapshot(self) -> Snapshot:
        snap = Snapshot()
        for j in [*self.running, self.pending_id]:
            job = self.slurm.job(j)
            snap.jobs[j] = (job.state, job.nodes, job.restarts)
        for line in self.slurm.run(["scontrol", "show", "partition", "-o"]).splitlines():
            kv = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
            if "PartitionName" in kv:
                snap.partitions[kv["PartitionName"]] = kv
        return snap

    def compare(self, before: Snapshot, after: Snapshot, to_objects: list[dict[str, Any]],
                from_objects: list[dict[str, Any]], ref: str) -> tuple[list[str], list[str]]:
        """(problems with running work, problems with partitions)."""
        work: list[str] = []
        for j, (state, nodes, restarts) in sorted(before.jobs.items()):
            if j == self.pending_id or state != "RUNNING":
                continue
            now = after.jobs.get(j)
            if now is None or now[0] != "RUNNING":
                work.append(f"Slurm job {j} ({self.running.get(j)}) is {now[0] if now else 'gone'} after the upgrade "
                            f"to {ref} (was RUNNING on {nodes})")
            elif now[1] != nodes:
                work.append(f"Slurm job {j} moved from {nodes} to {now[1]}")
            elif now[2] > restarts:
                work.append(f"Slurm job {j} was requeued ({restarts} -> {now[2]} restarts)")
        target, previous = partitions(to_objects), partitions(from_objects)
        used = {self.default, self.top}
        parts: list[str] = []
        for name, kv in sorted(before.partitions.items()):
            now_p = after.partitions.get(name)
            if now_p is None:
                if name in previous and name not in target and name not in used:
                    continue  # the release dropped a partition no job of ours was in
                parts.append(f"partition {name} did not survive the upgrade to {ref} (PriorityTier {kv.get('PriorityTier')})")
                continue
            want = target.get(name, kv)
            for key in ("PriorityTier", "State"):
                if key in want and now_p.get(key) != want[key]:
                    parts.append(f"partition {name} {key} is {now_p.get(key)}, {ref} renders {want[key]}")
        for name in sorted(set(target) - set(after.partitions)):
            parts.append(f"partition {name} of {ref} is not in Slurm after the upgrade (configuration not applied)")
        return work, parts

    def pending_admitted(self) -> bool:
        return self.slurm.job(self.pending_id).state == "RUNNING"

    def release_running(self) -> None:
        self.slurm.cancel(list(self.running))

    def cleanup(self) -> None:
        self.slurm.cancel([*self.running, self.pending_id] if self.pending_id else list(self.running))


class SlurmProber(upgrade_probe.Prober):
    TRANSIENT = (base.CaseFailed, errors.ToolError)

    def __init__(self, slurm: slurm_cli.Slurm, partition: str, gpu_type: str) -> None:
        super().__init__()
        self.slurm, self.partition, self.gpu_type = slurm, partition, gpu_type
        self.ids: dict[int, str] = {}

    def submit(self, i: int) -> None:
        self.ids[i] = self.slurm.sbatch(f"--partition={self.partition}", f"--gres=gpu:{self.gpu_type}:1", "-N1",
                                        "--job-name=upgrade-probe", wrap=SLEEP)

    def scheduled(self, i: int) -> bool:
        return self.slurm.job(self.ids[i]).state == "RUNNING"

    def remove(self, i: int) -> None:
        if i in self.ids:
            self.slurm.cancel([self.ids[i]])
