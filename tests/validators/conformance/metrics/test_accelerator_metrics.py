"""The ``accelerator_metrics/per_gpu_series`` judgement, on expositions the real gpu-health
exporter renders from the sim shape's nvidia-smi output: it passes one series per declared GPU
with values in range, and fails, naming node, GPU and metric, on every way an endpoint can be
wrong (a GPU missing, a reading missing or out of range, another node's series, stale readings,
a model or memory that disagrees with the node's labels, an agent pod without a metrics port).
The live case against the sim's API server is in test_accelerator_metrics_live.py."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from gpucatalog.clusters import shapes
from gpucatalog.clusters.sim import nodefs, nvidiasmi
from gpucatalog.gpuhealth import metrics, parse_nvsmi
from gpucatalog.gpuhealth.findings import Observation
from gpucatalog.validators.conformance import catalogue
from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.metrics import accelerator_metrics as am
from gpucatalog.validators.conformance.metrics import prom_text

SHAPE = shapes.get("h100-80gb-x8")
NODE = "h100-node-0000"


def _node(**labels: str) -> dict[str, Any]:
    return {"metadata": {"name": NODE, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                  "nvidia.com/gpu.memory": "81559", **labels}},
            "status": {"capacity": {"nvidia.com/gpu": "8"}}}


def _text(drop_gpu: int | None = None, busy: set[int] | None = None, node: str = NODE, at: float | None = None) -> str:
    hw = nodefs.healthy_hw(SHAPE, "c", node)
    if drop_gpu is not None:
        hw["gpus"][drop_gpu]["fallen_off_bus"] = True
    obs = Observation()
    obs.smi = parse_nvsmi.parse(nvidiasmi.nvidia_smi_xml(SHAPE, hw, busy or set()))
    return metrics.render(node, obs, time.time() if at is None else at)


def _sub(text: str, metric: str, gpu: int, value: str) -> str:
    """Set one GPU's sample of ``metric`` to ``value`` (or drop it with value '')."""
    pat = re.compile(rf'^({metric}{{[^}}]*gpu="{gpu}"[^}}]*}}) \S+$', re.M)
    assert pat.search(text), (metric, gpu)
    return pat.sub(lambda m: f"{m.group(1)} {value}" if value else "", text)


def judge(text: str, node: dict[str, Any] | None = None, max_age: float = 120) -> am.NodeMetrics:
    return am.judge(node or _node(), text, time.time(), max_age)


def test_one_series_per_declared_gpu_passes() -> None:
    seen = judge(_text(busy={2, 5}))
    assert seen.gpus == 8 and seen.with_temperature == 8 and seen.with_power == 8
    assert seen.series > 8 * 10
    assert seen.example["memory_total_gib"] == round(81559 / 1024, 2)


def test_a_missing_gpu_fails() -> None:
    with pytest.raises(base.CaseFailed, match=r"node h100-node-0000: 7 gpu_health_gpu_info series .* declares 8 GPUs"):
        judge(_text(drop_gpu=3))


def test_no_metrics_at_all_fails() -> None:
    with pytest.raises(base.CaseFailed, match="0 gpu_health_gpu_info series"):
        judge("# nothing here\n")


@pytest.mark.parametrize(("metric", "value", "needle"), [
    ("gpu_health_gpu_utilization_ratio", "", "GPU 4 .*: no gpu_health_gpu_utilization_ratio sample"),
    ("gpu_health_gpu_memory_total_bytes", "", "no gpu_health_gpu_memory_total_bytes sample"),
    ("gpu_health_gpu_utilization_ratio", "93", "utilization_ratio 93 is outside 0..1"),  # a percent, not a ratio
    ("gpu_health_gpu_memory_used_bytes", "1e12", "memory used 1e\\+12 B of total .* out of range"),
    ("gpu_health_gpu_memory_total_bytes", "1073741824", "memory total 1024 MiB, the node's nvidia.com/gpu.memory"),
    ("gpu_health_gpu_temperature_celsius", "-5", "temperature_celsius -5 is outside"),
    ("gpu_health_gpu_power_draw_watts", "2000", "power_draw_watts 2000 W is out of range"),
])
def test_a_reading_missing_or_out_of_range_fails(metric: str, value: str, needle: str) -> None:
    with pytest.raises(base.CaseFailed, match=needle):
        judge(_sub(_text(), metric, 4, value))


def test_readings_must_match_the_node_and_be_fresh() -> None:
    with pytest.raises(base.CaseFailed, match="does not match the node's nvidia.com/gpu.product"):
        judge(_text(), _node(**{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}))
    with pytest.raises(base.CaseFailed, match=r"reports series of node\(s\) \['h100-node-0001'\]"):
        judge(_text(node="h100-node-0001"))
    with pytest.raises(base.CaseFailed, match=r"from 600s ago \(limit 120s\)"):
        judge(_text(at=time.time() - 600))
    # a node without GPU feature discovery labels is judged by its capacity alone
    bare = {"metadata": {"name": NODE, "labels": {}}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    assert judge(_text(), bare).gpus == 8


def test_a_node_that_declares_no_gpus_fails() -> None:
    with pytest.raises(base.CaseFailed, match="declares no GPUs"):
        am.declared_gpus({"metadata": {"name": NODE, "labels": {}}, "status": {"capacity": {"cpu": "8"}}})
    assert am.declared_gpus({"metadata": {"name": NODE, "labels": {"nvidia.com/gpu.count": "4"}}, "status": {}}) == 4


def _pod(node: str, ports: list[dict[str, Any]], phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"name": f"agent-{node}"}, "spec": {"nodeName": node, "containers": [{"ports": ports}]},
            "status": {"phase": phase}}


def test_the_agent_pod_and_its_metrics_port() -> None:
    health = {"name": "health", "containerPort": 8081}
    metrics_port = {"name": "metrics", "containerPort": 9464}
    assert am._agent_pod([_pod("a", [health, metrics_port])], "a", "metrics") == ("agent-a", 9464)
    assert am._agent_pod([_pod("a", [health, metrics_port], "Pending")], "a", "metrics") is None
    assert am._agent_pod([_pod("b", [health, metrics_port])], "a", "metrics") is None
    with pytest.raises(base.CaseFailed, match="agent pod agent-a on a declares no container port named 'metrics'"):
        am._agent_pod([_pod("a", [health])], "a", "metrics")


def test_prometheus_text_reader() -> None:
    samples = prom_text.parse('# HELP x y\nup 1\na_b{l="q\\"\\\\\\n",m=""} 2.5 1700000000000\nnan_metric NaN\n')
    assert [(s.name, s.labels, s.value) for s in samples[:2]] == [("up", {}, 1.0), ("a_b", {"l": 'q"\\\n', "m": ""}, 2.5)]
    for bad, needle in (("{x} 1", "no metric name"), ('m{l=1} 1', "malformed labels"), ("m one", "not a number"),
                        ("m 1 2 3", "expected a value")):
        with pytest.raises(base.CaseFailed, match=needle):
            prom_text.parse(bad)


def test_the_case_is_in_the_catalogue() -> None:
    assert am.CASE_NAMES == ("per_gpu_series",)
    assert catalogue.known("accelerator_metrics/per_gpu_series")
    assert not catalogue.known("accelerator_metrics/preflight")
