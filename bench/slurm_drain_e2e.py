"""Benchmark: fault -> Slurm drain latency end to end, gpu-health detection included.

Brings up what ``catalog certify slurm --cluster sim`` brings up (sim cluster 2 x h100 + 1 x h200,
the real Slurm cluster with nodes named after the Kubernetes nodes, the ``slurm`` bundle's sim
profile installed through helm: gpu-health's agent and controller run as real processes with
the controller's scontrol hook on), then per sample injects XID 48 into one node's simulated
kernel log and measures, from the injection:

* quarantined: gpu-health's controller cordoned the node (its ``timeline`` annotation),
* drained:     ``sinfo`` shows the Slurm node drained with gpu-health's reason prefix,
* resumed:     the sim GPU reset cleared the fault, verification passed, the Slurm node resumed.

Bench-only settings (printed): flap threshold and breaker share raised so repeated faults on
three nodes keep taking the normal repair path. Agent and controller intervals are the
profile's (1 s each), which bound detection.

    PYTHONPATH=$PWD python3 bench/slurm_drain_e2e.py [--samples 9]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from gpucatalog.catalog import install, loader, render
from gpucatalog.clusters.sim.cluster import SimCluster
from gpucatalog.gpuhealth.engine import parse_ts
from gpucatalog.validators.conformance.slurm.cli import Slurm

REPO = Path(__file__).resolve().parents[1]
PREFIX = "gpu-health:"
STATE = "gpu-health.gpu-catalog.io/state"
TIMELINE = "gpu-health.gpu-catalog.io/timeline"


def _wait(what: str, probe: Any, timeout: float, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = probe()
        if got:
            return got
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def _healthy(core: Any, name: str) -> bool:
    n = core.read_node(name)
    conds = {c.type: c.status for c in n.status.conditions or []}
    return (not n.spec.unschedulable and (n.metadata.labels or {}).get(STATE, "healthy") == "healthy"
            and conds.get("GpuXidError") == "False")


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=9)
    a = ap.parse_args()
    cat = loader.load_catalog(REPO / "catalog")
    prof = cat.bundles[("slurm", "0.1.0")].profiles["sim"]
    ctl = prof.values["gpu-health"]["controller"]
    ctl["flap"] = {"threshold": 1000, "windowSeconds": 60}
    ctl["breaker"] = {"maxShare": 1.0, "windowSeconds": 60}
    print("bench-only values: gpu-health controller.flap.threshold=1000, controller.breaker.maxShare=1.0", file=sys.stderr)
    rb = render.render_bundle(cat, "slurm", "sim")
    sim = SimCluster(f"slurm-bench-{os.getpid()}")
    t0 = time.monotonic()
    kc = sim.up(int(rb.cluster["nodes"]), str(rb.cluster["shape"]))
    for g in rb.cluster.get("extraNodes", []):
        sim.add_nodes(int(g["nodes"]), str(g["shape"]))
    try:
        started = sim.start_services([o for c in rb.components for o in c.objects])
        print(f"sim cluster and {started[0]}; {time.monotonic() - t0:.1f}s in all", file=sys.stderr)
        install.install(rb, kc, timeout_s=300)
        core = client.CoreV1Api(sim.api_client())
        cli = Slurm(sim.endpoints()["slurm_conf"])
        nodes = sorted(cli.nodes())
        _wait("every node healthy (agents reporting)", lambda: all(_healthy(core, n) for n in nodes), 180, 0.5)
        quarantined, drained, resumed = [], [], []
        for i in range(a.samples):
            node = nodes[i % len(nodes)]
            _wait(f"{node} healthy and idle", lambda n=node: _healthy(core, n) and not cli.nodes()[n].drained, 120, 0.2)
            t_inject = time.time()
            sim.inject_fault(node, "xid", code=48)
            _wait(f"{node} drained", lambda n=node: (s := cli.nodes()[n]).drained and s.reason.startswith(PREFIX), 60)
            drained.append(time.time() - t_inject)
            _wait(f"{node} resumed", lambda n=node: not cli.nodes()[n].drained, 120, 0.05)
            resumed.append(time.time() - t_inject)
            ann = core.read_node(node).metadata.annotations or {}
            tl = json.loads(ann.get(TIMELINE, "{}"))
            q = parse_ts(tl.get("quarantined"))
            if q is not None:
                quarantined.append(q - t_inject)
            print(f"  {node}: drained {drained[-1] * 1000:.0f} ms, resumed {resumed[-1]:.1f} s", file=sys.stderr)
        print(f"fault -> Slurm drain, end to end ({a.samples} samples on {len(nodes)} nodes; agent and controller "
              "intervals 1 s; XID 48 -> RESET_GPU)")
        for label, xs in (("fault -> quarantined (k8s)", quarantined), ("fault -> Slurm drained", drained),
                          ("fault -> Slurm resumed", resumed)):
            if xs:
                print(f"  {label:28s} median {statistics.median(xs) * 1000:6.0f} ms, p95 {_pct(xs, 0.95) * 1000:6.0f} ms, "
                      f"max {max(xs) * 1000:6.0f} ms")
    finally:
        sim.down()


if __name__ == "__main__":
    main()
