"""Benchmark: the ``scale`` suite's cases on Kueue and on KAI, on the same large sim cluster, beside
the figures KAI's repository publishes for its own scale run.

For each stack it starts a fresh sim cluster of ``--nodes`` x 8 GPUs and a CPU node, installs the
stack's bundle components (Kueue: gpu-queueing 0.4.4's ``scale`` profile, Kueue and the team
queues; KAI: gpu-scheduling 0.2.1's ``sim`` profile, KAI and the team queues, from the binaries of
an image-map overlay, ``--image-map``), and runs the suite's cases (the code certification runs)
with the sizes of 0.4.4's ``scale`` profile, or ``--gpus`` / ``--jobs`` / ``--large`` /
``--distributed``. Thresholds are not the point here: every case gets one no run can miss.

KAI's published run (500 KWOK nodes x 8 GPUs, the scheduler given 3-5 CPUs, a real control plane)
filled 4,000 one-GPU jobs in 398 s, reclaimed one GPU in 13.9 s on average, a 2,000-GPU job in
102 s, and allocated a 512-pod distributed job in 49 s. Sizes differ from ours, so the table
compares rates (units a second) and the one-GPU reclaim latency; ratios are ours / published (above
1: faster for rates, slower for the latency). Different machines: read them as orders of magnitude.

    PYTHONPATH=$PWD python3 bench/scale_side_by_side.py [--stacks kueue,kai] [--nodes 500] [--image-map kai-images.yaml]
    # KAI's headline figure at its size: 4,000 one-GPU jobs
    PYTHONPATH=$PWD python3 bench/scale_side_by_side.py --gpus 4000 --cases fill_single_gpu_jobs --wait 1800 ...
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from gpucatalog.catalog import install, loader, render
from gpucatalog.clusters.sim import SimCluster
from gpucatalog.core import errors
from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.queueing import scale
from gpucatalog.validators.conformance.queueing_suites import adapters as queueing_adapters

REPO = Path(__file__).resolve().parents[1]
BUNDLES = {"kueue": ("gpu-queueing@0.4.4", "scale", ("kueue", "team-queues")),
           "kai": ("gpu-scheduling@0.2.1", "sim", ("kai-scheduler", "team-queues"))}
# KAI's published scale run: figure -> (units, seconds)
PUBLISHED = {"fill": (4000, 398.0), "reclaim_one_gpu": (1, 13.9), "large_job": (2000, 102.0), "distributed": (512, 49.0)}
NO_LIMIT = dict.fromkeys(scale.THRESHOLDS.values(), 1e9)


def measure(stack: str, a: argparse.Namespace, sizes: dict[str, Any]) -> dict[str, float]:
    cat = loader.load_catalog(REPO / "catalog")
    ref, profile, names = BUNDLES[stack]
    rb = render.render_bundle(cat, ref, profile)
    rb.components = [comp for comp in rb.components if comp.name in names]
    cluster = SimCluster(f"bench-scale-{stack}")
    if cluster.layout.root.exists():  # a leftover of an interrupted run
        cluster.down()
    try:
        t0 = time.monotonic()
        kc = cluster.up(a.nodes, "h100-80gb-x8", image_map=a.image_map if stack == "kai" else None)
        cluster.add_nodes(1, "cpu")  # both profiles keep their controllers off the GPU nodes
        cluster.wait_ready(300)
        cluster.start_services([o for comp in rb.components for o in comp.objects])
        install.install(rb, kc, timeout_s=600, gates=False)
        print(f"{stack}: {a.nodes} nodes up and installed in {time.monotonic() - t0:.0f}s", flush=True)
        ctx = base.SuiteContext(kubeconfig=kc, params={
            "bundle_values": {comp.name: comp.values for comp in rb.components}, "stack": stack,
            **sizes, "thresholds": NO_LIMIT}, log=lambda m: print(f"  {stack}: {m}", flush=True))
        adapter = queueing_adapters.adapter_for(ctx)
        try:
            pre = base.CaseResult("preflight", "passed")
            adapter.preflight(pre)
            s = scale.Scale(ctx, adapter, scale.parse(ctx.params))
            out: dict[str, base.CaseResult] = {}
            for name in a.cases.split(","):
                adapter.begin_case()
                out[name] = base.CaseResult(name, "passed")
                c0 = time.monotonic()
                s.run(name, out[name])
                print(f"  {stack}: {name} in {time.monotonic() - c0:.0f}s: {out[name].details['figure']}", flush=True)
        finally:
            adapter.close()
        found: dict[str, float] = {}
        if "fill_single_gpu_jobs" in out:
            fill = out["fill_single_gpu_jobs"].details
            found["fill"] = fill["gpus"] / fill["fill_s"]
            print(f"  {stack}: fill of {fill['gpus']} in {fill['fill_s']:.1f}s; floor {fill['floor']['seconds']:.1f}s, "
                  f"{fill['over_floor_s']:.1f}s above it", flush=True)
        if "reclaim_one_gpu_when_full" in out:
            found["reclaim_one_gpu"] = float(out["reclaim_one_gpu_when_full"].details["latency"]["p50"])
        if "reclaim_large_job" in out:
            large = out["reclaim_large_job"].details
            found["large_job"] = large["job_pods"] / large["large_job_reclaim_s"]
        if "distributed_job_allocation" in out:
            dist = out["distributed_job_allocation"].details
            found["distributed"] = dist["job_pods"] / dist["distributed_job_s"]
        return found
    finally:
        cluster.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stacks", default="kueue,kai")
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--gpus", type=int, default=None, help="GPUs each case works on (default: the scale profile's)")
    ap.add_argument("--large", type=int, default=None, help="GPUs of the large job reclaimed")
    ap.add_argument("--distributed", type=int, default=None, help="pods of the distributed job")
    ap.add_argument("--samples", type=int, default=None, help="one-GPU reclaims measured")
    ap.add_argument("--image-map", type=Path, default=None, help="image-map overlay with KAI's binaries")
    ap.add_argument("--cases", default="fill_single_gpu_jobs,reclaim_one_gpu_when_full,reclaim_large_job,"
                    "distributed_job_allocation", help="the cases to run, comma-separated (default: these four)")
    ap.add_argument("--wait", type=float, default=None, help="seconds one wait may take (default: the profile's)")
    a = ap.parse_args()
    unknown = sorted(set(a.cases.split(",")) - set(scale.CASES))
    if unknown:
        ap.error(f"--cases: unknown {', '.join(unknown)} (known: {', '.join(scale.CASES)})")
    cat = loader.load_catalog(REPO / "catalog")
    sizes = dict(render.render_bundle(cat, *BUNDLES["kueue"][:2]).suite_params["scale"])
    sizes.pop("thresholds")
    for key, value in (("gpus", a.gpus), ("large_job_gpus", a.large), ("distributed_pods", a.distributed),
                       ("reclaim_samples", a.samples), ("wait_seconds", a.wait)):
        if value is not None:
            sizes[key] = value
    figures: dict[str, dict[str, float]] = {}
    for stack in a.stacks.split(","):
        t0 = time.monotonic()
        try:
            figures[stack] = measure(stack, a, sizes)
            print(f"{stack}: measured in {time.monotonic() - t0:.0f}s", flush=True)
        except (errors.CatalogError, base.CaseFailed) as exc:
            print(f"{stack}: not run: {str(exc).splitlines()[0][:300]}", flush=True)
    published = {k: (u / s if k != "reclaim_one_gpu" else s) for k, (u, s) in PUBLISHED.items()}
    print(f"\nscale cases on sim, {a.nodes} nodes x 8 GPUs, each case on {sizes.get('gpus') or 'every'} GPUs "
          f"(large job {sizes.get('large_job_gpus')}, distributed job {sizes.get('distributed_pods')} pods); "
          "KAI published: 500 nodes, 4,000 jobs, its own machine")
    labels = {"fill": "fill, units/s", "reclaim_one_gpu": "reclaim one GPU, p50 s (published: mean)",
              "large_job": "large job reclaimed, GPUs/s", "distributed": "distributed job, pods/s"}
    print(f"  {'':42}{'published':>11}" + "".join(f"{s:>11}{s + '/pub':>11}" for s in figures))
    for key, label in labels.items():
        if not all(key in figures[s] for s in figures):
            continue
        row = "".join(f"{figures[s][key]:>11.2f}{figures[s][key] / published[key]:>11.2f}" for s in figures)
        print(f"  {label:42}{published[key]:>11.2f}{row}")


if __name__ == "__main__":
    main()
