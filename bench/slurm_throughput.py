"""Benchmark: jobs scheduled per second for 1,000 short GPU jobs on the local Slurm cluster.

8 nodes x 8 GPUs (64 GPUs). 1,000 ``sbatch --gres=gpu:1 --wrap true`` jobs are submitted held,
then released with one ``scontrol release``, so the figure is the scheduler's (not sbatch's)
rate: scheduled/s = jobs / time until none is pending; completed/s = jobs / time until the
queue is empty. Submission rate is printed separately.

    PYTHONPATH=$PWD python3 bench/slurm_throughput.py [--jobs 1000] [--nodes 8] [--no-accounting]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from slurm_start import spec  # bench/ is on sys.path when run as a script

from gpucatalog.clusters import slurm
from gpucatalog.core import executor


def count(env: dict[str, str], *states: str) -> int:
    args = ["squeue", "-h", "-o", "%i"] + (["-t", ",".join(states)] if states else [])
    return len(executor.run(args, env=env).stdout.split())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--no-accounting", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="slurm-bench-") as tmp:
        c = slurm.SlurmCluster(spec(a.nodes, not a.no_accounting), Path(tmp) / "c")
        c.start(timeout=300)
        try:
            env = c.env
            t = time.monotonic()
            ids = [
                executor.run(["sbatch", "--parsable", "--hold", "--gres=gpu:1", "--output=/dev/null", "--wrap", "true"], env=env).stdout.strip()
                for _ in range(a.jobs)
            ]
            submit = time.monotonic() - t
            t0 = time.monotonic()
            executor.run(["scontrol", "release", ",".join(ids)], env=env)
            scheduled = completed = 0.0
            while True:
                pending = count(env, "PENDING")
                if not scheduled and pending == 0:
                    scheduled = time.monotonic() - t0
                if count(env) == 0:
                    completed = time.monotonic() - t0
                    break
                time.sleep(0.1)
            print(f"{a.jobs} GPU jobs on {a.nodes} nodes x 8 GPUs (accounting={'off' if a.no_accounting else 'on'})")
            print(f"  submit (sbatch, held): {a.jobs / submit:.1f} jobs/s ({submit:.1f}s)")
            print(f"  scheduled:             {a.jobs / scheduled:.1f} jobs/s ({scheduled:.1f}s until none pending)")
            print(f"  completed:             {a.jobs / completed:.1f} jobs/s ({completed:.1f}s until queue empty)")
        finally:
            c.stop()


if __name__ == "__main__":
    main()
