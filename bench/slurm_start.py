"""Benchmark: local Slurm cluster start time for 8 and 64 simulated GPU nodes.

Starts the cluster the sim provider starts (munged, MariaDB + slurmdbd, slurmctld, one slurmd
per node) from a spec like the rendered ``slurm`` chart's, until every node is idle, then stops
it. Prints per-phase and total seconds (median of --repeat runs) and the time ``stop`` takes.

    PYTHONPATH=$PWD python3 bench/slurm_start.py [--nodes 8 64] [--repeat 3] [--no-accounting]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gpucatalog.clusters import slurm

EXTRA = (
    "GresTypes=gpu", "PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE", "JobRequeue=1",
    "PartitionName=batch Nodes=h100 PriorityTier=1 Default=YES", "PartitionName=priority Nodes=h100 PriorityTier=10",
)
ACCT = ("AccountingStorageTRES=gres/gpu", "AccountingStorageEnforce=associations,limits,qos")


def spec(nodes: int, accounting: bool) -> slurm.ClusterSpec:
    return slurm.ClusterSpec("bench", (slurm.NodeSetSpec("h100", nodes, "h100", 8),), EXTRA + (ACCT if accounting else ()), accounting)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-accounting", action="store_true")
    a = ap.parse_args()
    acct = not a.no_accounting
    print(f"slurm cluster start (accounting={'on' if acct else 'off'}), median of {a.repeat}")
    for n in a.nodes:
        runs: list[dict[str, float]] = []
        for _ in range(a.repeat):
            with tempfile.TemporaryDirectory(prefix="slurm-bench-") as tmp:
                c = slurm.SlurmCluster(spec(n, acct), Path(tmp) / "c")
                c.start(timeout=300)
                t = time.monotonic()
                c.stop()
                runs.append({**c.timings, "stop": time.monotonic() - t})
        keys = list(runs[0])
        fig = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}
        parts = "  ".join(f"{k}={v:.2f}s" for k, v in fig.items() if k != "total")
        print(f"  {n:3d} nodes: total {fig['total']:.2f}s  ({parts})")


if __name__ == "__main__":
    main()
