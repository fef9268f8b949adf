"""Benchmark: fault -> Slurm drain latency, the Slurm leg (hook call -> node seen drained).

Uses gpu-health's own Slurm hook (``gpucatalog.gpuhealth.slurm.ScontrolSlurm``) when present,
else the same ``scontrol update state=drain`` through the conformance suite's CLI wrapper.
For each sample a 1-GPU job runs on the node (so the node goes DRAINING, as in production),
the hook drains it, and the time until ``sinfo`` reports it draining/drained with the prefixed
reason is measured; then it is resumed. Prints median and p95 over --samples.
The Kubernetes leg (fault -> gpu-health condition -> controller decision) is measured by the
gpu-health benchmarks on the sim cluster; add the two for end-to-end.

    PYTHONPATH=$PWD python3 bench/slurm_drain.py [--samples 20] [--nodes 8]
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from slurm_start import spec

from gpucatalog.clusters import slurm
from gpucatalog.validators.conformance.slurm.cli import Slurm


def hook_for(conf: str, cli: Slurm) -> tuple[str, Any, Any]:
    try:
        mod = importlib.import_module("gpucatalog.gpuhealth.slurm")
        h = mod.ScontrolSlurm(scontrol=("env", f"SLURM_CONF={conf}", "scontrol"), prefix=mod.DEFAULT_PREFIX)
        return "gpu-health ScontrolSlurm", (lambda n: h.drain(n, "XID 79 (bench)")), h.resume
    except (ImportError, AttributeError):
        return "scontrol via slurm_cli", (lambda n: cli.drain(n, "gpu-health: XID 79 (bench)")), cli.resume


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=8)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="slurm-bench-") as tmp:
        c = slurm.SlurmCluster(spec(a.nodes, False), Path(tmp) / "c")
        c.start(timeout=300)
        try:
            cli = Slurm(c.endpoints()["slurm_conf"])
            name, drain, resume = hook_for(c.endpoints()["slurm_conf"], cli)
            call, seen = [], []
            for i in range(a.samples):
                node = f"h100-{i % a.nodes}"
                job = cli.sbatch("-w", node, "--gres=gpu:1", wrap="sleep 60")
                while cli.job(job).state != "RUNNING":
                    time.sleep(0.02)
                t0 = time.monotonic()
                drain(node)
                call.append(time.monotonic() - t0)
                while not (n := cli.nodes()[node]).drained or not n.reason.startswith("gpu-health:"):
                    time.sleep(0.005)
                seen.append(time.monotonic() - t0)
                cli.cancel([job])
                resume(node)
            q = statistics.quantiles(seen, n=20)[-1] if len(seen) >= 2 else seen[0]
            print(f"fault -> Slurm drain, Slurm leg ({name}, {a.samples} samples, {a.nodes} nodes, a job running on the node)")
            print(f"  hook call:            median {statistics.median(call) * 1000:.0f} ms")
            print(f"  drained in sinfo:     median {statistics.median(seen) * 1000:.0f} ms, p95 {q * 1000:.0f} ms")
        finally:
            c.stop()


if __name__ == "__main__":
    main()
