"""Benchmark: the remediation decision engine with 1,000 GPU nodes and 50 simultaneous faults.

Runs reconcile passes of :func:`gpucatalog.gpuhealth.engine.decide_all` over an in-memory fleet
(no cluster: the engine is pure), applying each plan and playing the outside world (drains
finish, repairs succeed, verification passes) until every admitted node is back in service.
Prints passes/s, node decisions/s, p50/p95 pass time, and what the circuit breaker allowed.

    PYTHONPATH=$PWD python3 bench/gpuhealth_decisions.py [--nodes 1000] [--faults 50] [--share 0.02]
"""

from __future__ import annotations

import argparse
import statistics
import time

from gpucatalog.gpuhealth import engine
from gpucatalog.gpuhealth.breaker import Breaker
from gpucatalog.gpuhealth.xidpolicy import Action


class Node:
    __slots__ = ("name", "labels", "annotations", "unschedulable", "fault")

    def __init__(self, name: str) -> None:
        self.name = name
        self.labels: dict[str, str] = {"nvidia.com/gpu.present": "true"}
        self.annotations: dict[str, str] = {}
        self.unschedulable = False
        self.fault: Action | None = None

    def view(self) -> engine.NodeView:
        st = self.labels.get(engine.STATE_LABEL, engine.HEALTHY)
        return engine.NodeView(
            self.name, self.labels, self.annotations, self.unschedulable, self.fault,
            fault_summary="GpuXidError: action=REBOOT; XID 79" if self.fault else "",
            pods_remaining=0 if st == engine.DRAINING else None,
            verify="passed" if st == engine.VERIFYING else None,
        )

    def apply(self, plan: engine.Plan) -> None:
        for k, v in plan.labels.items():
            if v is None:
                self.labels.pop(k, None)
            else:
                self.labels[k] = v
        for k, v in plan.annotations.items():
            if v is None:
                self.annotations.pop(k, None)
            else:
                self.annotations[k] = v
        if plan.unschedulable is not None:
            self.unschedulable = plan.unschedulable
        for e in plan.effects:
            if e.kind == "repair":  # the actuator succeeds and the fault is gone
                self.annotations[engine.A_REPAIR_RESULT] = "succeeded"
                self.fault = None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--faults", type=int, default=50)
    ap.add_argument("--share", type=float, default=0.02, help="breaker max share (0.02 of 1000 = 20)")
    ap.add_argument("--parallel", type=int, default=10, help="max parallel repairs")
    args = ap.parse_args()

    fleet = [Node(f"gpu-{i:04d}") for i in range(args.nodes)]
    for n in fleet[:: max(1, args.nodes // args.faults)][: args.faults]:
        n.fault = Action.REBOOT
    breaker = Breaker(max_share=args.share, window_s=600)
    policy = engine.Policy(max_parallel_repairs=args.parallel, cooldown_s=0)
    now = time.time()
    pass_times: list[float] = []
    decisions = 0
    max_quarantined = 0
    for i in range(500):
        views = [n.view() for n in fleet]
        t0 = time.perf_counter()
        plans = engine.decide_all(views, breaker, policy, now + i)
        pass_times.append(time.perf_counter() - t0)
        decisions += len(plans)
        by = {n.name: n for n in fleet}
        for p in plans:
            if not p.empty:
                by[p.node].apply(p)
        active = sum(1 for n in fleet if n.labels.get(engine.STATE_LABEL, "healthy") != "healthy")
        max_quarantined = max(max_quarantined, sum(1 for n in fleet if n.unschedulable))
        if active == 0 and i > 5:
            break
    total = sum(pass_times)
    p = sorted(pass_times)
    repaired = sum(1 for n in fleet if n.fault is None) - (args.nodes - args.faults)
    print(f"nodes={args.nodes} simultaneous_faults={args.faults} breaker_share={args.share} "
          f"limit={breaker.limit(args.nodes)} parallel_repairs={args.parallel}")
    print(f"passes={len(pass_times)} node_decisions={decisions} total_engine_s={total:.3f}")
    print(f"node_decisions_per_s={decisions / total:,.0f} passes_per_s={len(pass_times) / total:,.1f}")
    print(f"pass_p50_ms={statistics.median(p) * 1000:.2f} pass_p95_ms={p[int(len(p) * 0.95) - 1] * 1000:.2f}")
    print(f"max_nodes_cordoned_at_once={max_quarantined} (breaker limit {breaker.limit(args.nodes)}) "
          f"breaker={breaker.status} repaired={repaired} refused_by_breaker="
          f"{sum(1 for n in fleet if n.annotations.get(engine.A_SKIPPED) == 'circuit-breaker-open')}")
    assert max_quarantined <= breaker.limit(args.nodes), "breaker limit exceeded"


if __name__ == "__main__":
    main()
