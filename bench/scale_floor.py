"""Benchmark: the sim's own floor under the scale suite's fill, so that a stack's fill time can be
stated as time above that floor.

On one sim cluster of ``--nodes`` x 8 GPUs and a CPU node, with gpu-queueing 0.4.4's Kueue and team
queues installed (its ``scale`` values), the same number of one-GPU ``pause`` pods (kwok runs
them) is placed three ways, each on the same pool of ``--gpus`` GPUs (the other GPU nodes
cordoned, as the suite's ``gpus`` does), one after the other:

- **floor**: the scale suite's own floor (``Scale.floor``, which ``fill_single_gpu_jobs`` also
  measures and records): pods naming a scheduler that does not exist, bound as they appear to the
  next free GPU of a schedulable node (Binding API, 8 threads): the API server, etcd and kwok
  with no scheduling decision at all;
- **kube-scheduler**: the same pods, default scheduler, no queue;
- **Kueue**: the suite's ``fill_single_gpu_jobs`` (a Job per unit through the team queues).

Each figure is seconds from the first create to the last pod bound; pods are created one after
the other in every run, as the suite submits. Printed: each time, pods a second, and each time
minus the floor.

    PYTHONPATH=$PWD python3 bench/scale_floor.py [--nodes 500] [--gpus 400]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpucatalog.catalog import install, loader, render
from gpucatalog.clusters.sim import SimCluster
from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.queueing import scale
from gpucatalog.validators.conformance.queueing_suites import adapters as queueing_adapters

REPO = Path(__file__).resolve().parents[1]
NO_LIMIT = dict.fromkeys(scale.THRESHOLDS.values(), 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--gpus", type=int, default=400, help="the pool: GPUs of whole idle nodes left schedulable")
    a = ap.parse_args()
    rb = render.render_bundle(loader.load_catalog(REPO / "catalog"), "gpu-queueing@0.4.4", "scale")
    rb.components = [c for c in rb.components if c.name in ("kueue", "team-queues")]
    cluster = SimCluster("bench-scale-floor")
    if cluster.layout.root.exists():  # a leftover of an interrupted run
        cluster.down()
    try:
        kc = cluster.up(a.nodes, "h100-80gb-x8")
        cluster.add_nodes(1, "cpu")
        cluster.wait_ready(300)
        cluster.start_services([o for c in rb.components for o in c.objects])
        install.install(rb, kc, timeout_s=600, gates=False)
        ctx = base.SuiteContext(kubeconfig=kc, params={
            "bundle_values": {c.name: c.values for c in rb.components}, "stack": "kueue", "gpus": a.gpus,
            "thresholds": NO_LIMIT})
        adapter = queueing_adapters.adapter_for(ctx)
        s = scale.Scale(ctx, adapter, scale.parse(ctx.params))
        times: dict[str, float] = {}
        try:
            for label, scheduler in (("floor (the suite binds)", scale.FLOOR_SCHEDULER), ("kube-scheduler", None)):
                res = base.CaseResult(label, "passed")
                with s.pool(res), adapter.space("floor", res) as sp:
                    times[label] = s.floor(sp, a.gpus, scheduler)
                print(f"{label}: {times[label]:.1f}s", flush=True)
            res = base.CaseResult("fill_single_gpu_jobs", "passed")
            s.run("fill_single_gpu_jobs", res)
            times["Kueue (the suite's fill)"] = float(res.details["fill_s"])
        finally:
            adapter.close()
        n = a.gpus
        floor = next(iter(times.values()))
        print(f"\nfill of {n} one-GPU pods on a {a.nodes}-node sim (pool of {n} GPUs)")
        print(f"  {'':28}{'seconds':>9}{'pods/s':>9}{'over floor':>12}")
        for label, secs in times.items():
            print(f"  {label:28}{secs:>9.1f}{n / secs:>9.1f}{secs - floor:>11.1f}s")
    finally:
        cluster.down()


if __name__ == "__main__":
    main()
