"""Benchmark: the queueing contract on both scheduling stacks, on the same sim cluster shape.

For each stack it installs the stack's bundle components (gpu-queueing: Kueue + team queues;
gpu-scheduling: KAI + team queues) on a fresh sim cluster of ``--nodes`` x 8 GPUs, then measures
through the contract's own adapters (the same code certification runs):

- reclaim latency p50/p95: team B's in-quota pods scheduled after B submits, while A borrows every
  GPU (``reclaim_borrowed_gpus``, ``--rounds`` rounds);
- time to admit a gang: submit -> all ``--gang`` pods scheduled (``gang_with_room_starts_together``,
  ``--gangs`` times; median and max);
- pods placed per second: ``--pods`` independent one-GPU units in one team with quota for all,
  divided by the time until the last is scheduled.

KAI runs only where its binaries are supplied to the sim through an image-map overlay
(``--image-map``, see docs/kai.md); otherwise its column says why it did not run and no ratio is
printed. Ratios are KAI / Kueue (below 1: KAI is faster).

    PYTHONPATH=$PWD python3 bench/queueing_side_by_side.py [--stacks kueue,kai] [--nodes 4] [--image-map kai-images.yaml]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from gpucatalog.catalog import install, loader, render
from gpucatalog.clusters.sim import SimCluster
from gpucatalog.core import errors
from gpucatalog.validators.conformance.kit import base, gpu_inventory
from gpucatalog.validators.conformance.queueing import contract as queueing_contract
from gpucatalog.validators.conformance.queueing.contract import Dept, Team
from gpucatalog.validators.conformance.queueing_suites import adapters as queueing_adapters

REPO = Path(__file__).resolve().parents[1]
BUNDLES = {"kueue": ("gpu-queueing@0.1.0", ("kueue", "team-queues")),
           "kai": ("gpu-scheduling@0.1.0", ("kai-scheduler", "team-queues"))}


def placement_rate(c: queueing_contract.Contract, pods: int) -> float:
    nodes = sorted(gpu_inventory.free_gpus(c.kube))
    res = base.CaseResult("pods_per_second", "passed")
    with c.a.space("bench", res) as sp:
        sp.build(Dept("root", pods, (Team("q", pods),)))
        t0 = time.monotonic()
        sp.submit("q", "p", pods, nodes)
        c.wait(f"all {pods} pods placed", lambda: len(sp.scheduled("p")) >= pods or None)
        return pods / (time.monotonic() - t0)


def measure(stack: str, a: argparse.Namespace) -> dict[str, Any]:
    ref, names = BUNDLES[stack]
    rb = render.render_bundle(loader.load_catalog(REPO / "catalog"), ref, "sim")
    rb.components = [comp for comp in rb.components if comp.name in names]
    cluster = SimCluster(f"bench-{stack}")
    if cluster.layout.root.exists():  # a leftover of an interrupted run
        cluster.down()
    try:
        kc = cluster.up(a.nodes, "h100-80gb-x8", image_map=a.image_map if stack == "kai" else None)
        cluster.wait_ready(180)
        cluster.start_services([o for comp in rb.components for o in comp.objects])
        install.install(rb, kc, timeout_s=300, gates=False)
        ctx = base.SuiteContext(kubeconfig=kc, params={
            "bundle_values": {comp.name: comp.values for comp in rb.components}, "stack": stack,
            "reclaim_rounds": a.rounds, "gang_size": a.gang})
        adapter = queueing_adapters.adapter_for(ctx)
        c = queueing_contract.Contract(ctx, adapter)
        try:
            pre = base.CaseResult("preflight", "passed")
            c.preflight(ctx, pre)
            adapter.begin_case()
            reclaim = base.CaseResult("reclaim_borrowed_gpus", "passed")
            c.reclaim_borrowed_gpus(reclaim)
            admits = []
            for _ in range(a.gangs):
                adapter.begin_case()
                g = base.CaseResult("gang_with_room_starts_together", "passed")
                c.gang_with_room_starts_together(g)
                admits.append(float(g.details["all_scheduled_after_s"]))
            adapter.begin_case()
            rate = placement_rate(c, a.pods)
        finally:
            adapter.close()
        lat = reclaim.details["latency"]
        return {"reclaim_p50_s": lat["p50"], "reclaim_p95_s": lat["p95"], "samples": lat["count"],
                "gang_admit_median_s": statistics.median(admits), "gang_admit_max_s": max(admits),
                "pods_per_s": rate}
    finally:
        cluster.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stacks", default="kueue,kai")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gang", type=int, default=8)
    ap.add_argument("--gangs", type=int, default=3)
    ap.add_argument("--pods", type=int, default=32)
    ap.add_argument("--image-map", type=Path, default=None, help="image-map overlay with KAI's binaries")
    a = ap.parse_args()
    figures: dict[str, dict[str, Any]] = {}
    for stack in a.stacks.split(","):
        t0 = time.monotonic()
        try:
            figures[stack] = measure(stack, a)
            print(f"{stack}: measured in {time.monotonic() - t0:.0f}s", flush=True)
        except (errors.CatalogError, base.CaseFailed) as exc:
            print(f"{stack}: not run: {str(exc).splitlines()[0][:300]}", flush=True)
    print(f"\nqueueing contract on sim, {a.nodes} nodes x 8 GPUs ({a.rounds} reclaim rounds, "
          f"{a.gangs} gangs of {a.gang}, {a.pods} pods)")
    keys = [("reclaim_p50_s", "reclaim latency p50 (s)"), ("reclaim_p95_s", "reclaim latency p95 (s)"),
            ("gang_admit_median_s", "gang admitted, median (s)"), ("gang_admit_max_s", "gang admitted, max (s)"),
            ("pods_per_s", "pods placed per second")]
    print(f"  {'':28}" + "".join(f"{s:>12}" for s in figures) + ("   kai/kueue" if len(figures) == 2 else ""))
    for key, label in keys:
        row = "".join(f"{figures[s][key]:>12.2f}" for s in figures)
        ratio = f"{figures['kai'][key] / figures['kueue'][key]:>12.2f}" if {"kai", "kueue"} <= set(figures) else ""
        print(f"  {label:28}{row}{ratio}")


if __name__ == "__main__":
    main()
