"""Benchmark on the sim cluster: fault -> condition, fault -> cordon and fault -> back in service.

Injects XID 79 (RESTART_BM -> reboot; the sim's repair hook clears the fault) repeatedly,
round-robin over the GPU nodes (so the flap rule does not send a node to hardware repair), and
polls the node through the API every 50 ms. The breaker is reset before each injection, as an
operator would between deliberate tests. Needs a running sim cluster with gpu-health installed
(``tests/gpuhealth/test_integration_sim.py`` with ``GPU_CATALOG_KEEP_CLUSTER=1`` leaves one).

    PYTHONPATH=$PWD python3 bench/gpuhealth_latency.py --sim-name gpuhealth --repeats 10
"""

from __future__ import annotations

import argparse
import statistics
import time

from gpucatalog.clusters.sim.cluster import SimCluster
from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.remediation import contract as rc
from gpucatalog.validators.conformance.remediation import env as remediation_env


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sim-name", default="gpuhealth")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--namespace", default="gpu-health")
    args = ap.parse_args()
    cluster = SimCluster(args.sim_name)
    ctx = base.SuiteContext(kubeconfig=cluster.kubeconfig(),
                            params={"inject_fault": cluster.inject_fault, "gpu_health_namespace": args.namespace})
    env = remediation_env.Env(ctx)
    cond, cordon, back = [], [], []
    for i in range(args.repeats):
        node = env.nodes[i % len(env.nodes)]
        env.ensure_healthy(node)
        env.reset_breaker()
        t0 = time.time()
        cluster.inject_fault(node, "xid", code=79, gpu=i % 8)
        seen: dict[str, float] = {}
        while time.time() - t0 < 180:
            n = env.node(node)
            now = time.time()
            if "condition" not in seen and rc.condition(n, "GpuXidError").get("status") == "True":
                seen["condition"] = now - t0
            if "cordon" not in seen and rc.cordoned(n):
                seen["cordon"] = now - t0
            if "cordon" in seen and rc.state(n) == "healthy" and not rc.cordoned(n):
                seen["back"] = now - t0
                break
            time.sleep(0.05)
        if "back" not in seen:
            raise SystemExit(f"{node}: not back in service after 180s: {seen}")
        cond.append(seen["condition"])
        cordon.append(seen["cordon"])
        back.append(seen["back"])
        print(f"{i:2d} {node}: condition {seen['condition']:.2f}s cordon {seen['cordon']:.2f}s "
              f"back in service {seen['back']:.2f}s")
    for name, vals in (("fault->condition", cond), ("fault->cordon", cordon), ("fault->back_in_service", back)):
        print(f"{name}: n={len(vals)} p50={statistics.median(vals):.2f}s p95={pct(vals, 0.95):.2f}s "
              f"max={max(vals):.2f}s")


if __name__ == "__main__":
    main()
