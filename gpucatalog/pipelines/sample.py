"""A small, realistic certification run for the report's benchmark and tests: three suites run
through the real ``run_cases`` (real timings), recording the placements and remediation steps
the pictures draw, one case failing on purpose.

Called by ``bench/report_screenshot.py`` and tests/pipelines. Not used by ``certify``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpucatalog.validators.conformance.kit import base

NODES = [{"name": f"sim-h100-{i}", "gpus": 8, "product": "NVIDIA-H100-80GB-HBM3"} for i in range(3)]

CLUSTER: dict[str, Any] = {
    "provider": "sim",
    "kubernetesVersion": "v1.36.3",
    "nodes": NODES,
    "live": ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kai-scheduler"],
    "simulated": ["GPU driver", "GPU hardware", "faults"],
}


def _sleep(s: float) -> None:
    time.sleep(s)


def _fractional(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    _sleep(0.03)
    res.details["placements"] = [
        {"pod": "frac-a", "node": "sim-h100-0", "gpu": 0, "fraction": 0.5},
        {"pod": "frac-b", "node": "sim-h100-0", "gpu": 0, "fraction": 0.25},
        {"pod": "frac-c", "node": "sim-h100-0", "gpu": 1, "fraction": 0.5},
        {"pod": "whole-1", "node": "sim-h100-1", "gpu": 3, "fraction": 1.0},
        {"pod": "whole-2", "node": "sim-h100-1", "gpu": 4, "fraction": 1.0},
    ]


def _gang(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    _sleep(0.05)
    res.details["placements"] = [
        {"pod": f"gang-{i}", "node": f"sim-h100-{i % 3}", "gpu": i // 3, "fraction": 1.0} for i in range(6)
    ]


def _reclaim(ctx: base.SuiteContext, res: base.CaseResult) -> None:
    _sleep(0.02)
    raise base.CaseFailed("team-b pod still Pending after 30s: queue team-a over quota was not reclaimed")


def _remediate(node: str, durations: list[float]) -> base.Case:
    def case(ctx: base.SuiteContext, res: base.CaseResult) -> None:
        _sleep(0.04)
        states = ["Healthy", "FaultDetected", "Cordoned", "Draining", "Repairing", "Verifying", "Uncordoned"]
        res.details["node"] = node
        t = 100.0
        res.details["steps"] = []
        for state, d in zip(states, [*durations, 0.0], strict=True):
            res.details["steps"].append({"state": state, "t": t})
            t += d

    return case


def run() -> list[base.SuiteResult]:
    ctx = base.SuiteContext(kubeconfig=Path("/dev/null"))
    return [
        base.run_cases("fractional_gpu", ctx, [("half-and-quarter-share-one-gpu", _fractional)]),
        base.run_cases("gang", ctx, [("all-or-nothing-6-pods", _gang), ("reclaim-over-quota", _reclaim)]),
        base.run_cases("fault_remediation", ctx, [("xid-79-reset", _remediate("sim-h100-0", [1.0, 0.4, 0.2, 2.5, 3.0, 1.2])),
                                                  ("ib-link-down", _remediate("sim-h100-2", [2.0, 0.5, 0.3, 4.0, 1.5, 0.8]))]),
    ]
