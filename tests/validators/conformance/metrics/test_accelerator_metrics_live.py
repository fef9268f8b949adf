"""``accelerator_metrics/per_gpu_series`` against a real sim cluster: the gpu-health chart
installed with real helm, its agents run by the sim kubelet in their own pod network namespaces,
their endpoints read through the real kube-apiserver's ``pods/proxy`` (egress to the pod IPs via
the sim's proxy). The case fails while the agents serve no metrics, passes once the chart turns
them on (two nodes x 8 GPUs), and fails again when a GPU falls off the bus on one node (XID 79:
nvidia-smi lists 7), naming that node."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.clusters.sim.cluster import SimCluster
from gpucatalog.core import executor
from gpucatalog.toolchain import build
from gpucatalog.validators.conformance.kit import base, kube_client
from gpucatalog.validators.conformance.metrics import accelerator_metrics as suite

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
CHART = Path(__file__).resolve().parents[4] / "charts/gpu-health"
NS = "gpu-health"


@pytest.fixture(scope="module")
def values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    doc = yaml.safe_load((CHART / "ci" / "sim-values.yaml").read_text())
    doc["controller"] = {"enabled": False}  # the agents only: nothing repairs the faults injected here
    path = tmp_path_factory.mktemp("values") / "values.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def cluster(values: Path) -> Iterator[SimCluster]:
    c = SimCluster(f"ptmetrics-{os.getpid()}")
    c.up(2, "h100-80gb-x8")
    try:
        _helm(c, values)  # the chart's default: no metrics
        yield c
    finally:
        c.down()


def _helm(c: SimCluster, values: Path, *sets: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    executor.run([build.ensure("helm"), "upgrade", "--install", "gpu-health", CHART, "-n", NS, "--create-namespace",
                  "-f", values, *args, "--kubeconfig", c.kubeconfig(), "--wait", "--timeout", "180s"], timeout=240)


def _run(c: SimCluster) -> base.SuiteResult:
    return suite.run(base.SuiteContext(kubeconfig=c.kubeconfig(), params={"metrics_namespace": NS}))


def _scrape_until(c: SimCluster, node: str, what: str, ok: Any) -> None:
    """Wait until the agent on ``node`` serves an exposition ``ok`` accepts (its next cycle)."""
    kube = kube_client.Kube(c.kubeconfig())
    pods = kube.request("GET", f"/api/v1/namespaces/{NS}/pods", query={"fieldSelector": f"spec.nodeName={node}"})
    pod = next(p["metadata"]["name"] for p in pods["items"] if "agent" in p["metadata"]["name"])
    url = f"/api/v1/namespaces/{NS}/pods/{pod}:9464/proxy/metrics"
    base.wait_for(what, lambda: (lambda r: r[0] == 200 and ok(r[1]))(kube.get_text(url)), 60, 1.0)


def test_metrics_case_fails_without_metrics_passes_with_them_and_fails_on_a_lost_gpu(
        cluster: SimCluster, values: Path) -> None:
    off = _run(cluster).cases[0]
    assert off.result == "failed"
    assert "declares no container port named 'metrics'" in off.reason and "agent.metrics.enabled" in off.reason

    _helm(cluster, values, "agent.metrics.enabled=true")
    t0 = time.monotonic()
    on = _run(cluster).cases[0]
    print("per_gpu_series", on.result, round(time.monotonic() - t0, 1), on.details)
    assert on.result == "passed", on.reason
    assert on.details["nodes"] == 2 and on.details["gpus"] == 16 and on.details["via"] == "pods/proxy"
    assert on.details["gpus_with_temperature"] == 16 and on.details["gpus_with_power"] == 16

    lost = sorted(_node_names(cluster))[1]
    cluster.inject_fault(lost, "xid", code=79, gpu=2)
    try:
        _scrape_until(cluster, lost, "the agent to list 7 GPUs", lambda t: f'gpu_health_node_gpus{{node="{lost}"}} 7' in t)
        gone = _run(cluster).cases[0]
        assert gone.result == "failed"
        assert f"node {lost}: 7 gpu_health_gpu_info series" in gone.reason and "declares 8 GPUs" in gone.reason
    finally:
        cluster.inject_fault(lost, "clear")
    _scrape_until(cluster, lost, "the agent to list 8 GPUs again", lambda t: f'gpu_health_node_gpus{{node="{lost}"}} 8' in t)
    assert _run(cluster).cases[0].result == "passed"


def _node_names(c: SimCluster) -> list[str]:
    kube = kube_client.Kube(c.kubeconfig())
    return [n["metadata"]["name"] for n in kube.request("GET", "/api/v1/nodes")["items"]]
