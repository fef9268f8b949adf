"""gpu-health on the sim cluster: the real chart installed with real helm, the agent and
controller run by the sim kubelet as processes (with their ServiceAccount's RBAC), faults
injected into node folders, and the ``fault_remediation`` conformance suite judging the result.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpu-health"
NAMESPACE = "gpu-health"


@pytest.fixture(scope="module")
def gpu_health_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sim = pytest.importorskip("gpucatalog.clusters.sim.cluster")
    from gpucatalog.core import executor
    from gpucatalog.toolchain.build import ensure

    name = os.environ.get("GPU_HEALTH_SIM_NAME", f"gh-{os.getpid()}")
    keep = os.environ.get("GPU_CATALOG_KEEP_CLUSTER", "") not in ("", "0")
    cluster = sim.SimCluster(name)
    if not (keep and cluster.running()):
        cluster.up(8, "h100-80gb-x8", heartbeat_s=3.0)
    values = yaml.safe_load((CHART / "ci" / "sim-values.yaml").read_text())
    vfile = tmp_path_factory.mktemp("values") / "values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    executor.run([str(ensure("helm")), "upgrade", "--install", "gpu-health", str(CHART), "-n", NAMESPACE,
                  "--create-namespace", "-f", str(vfile), "--kubeconfig", str(cluster.kubeconfig()),
                  "--wait", "--timeout", "180s"], timeout=240)
    _reset_nodes(cluster)
    try:
        yield cluster
    finally:
        if not keep:
            cluster.down()


def _reset_nodes(cluster: Any) -> None:
    """A kept cluster may hold earlier runs' faults and parked nodes: clear the faults, release
    parked nodes and forget fault history, as a fresh cluster would start."""
    from kubernetes import client

    core = client.CoreV1Api(cluster.api_client())
    for node in core.list_node(label_selector="nvidia.com/gpu.present=true").items:
        cluster.inject_fault(node.metadata.name, "clear")
        ann = node.metadata.annotations or {}
        patch: dict[str, Any] = {"gpu-health.gpu-catalog.io/fault-history": None}
        if (node.metadata.labels or {}).get("gpu-health.gpu-catalog.io/state") in ("hardware-repair", "escalated"):
            patch["gpu-health.gpu-catalog.io/resolved"] = "true"
        if "gpu-health.gpu-catalog.io/fault-history" in ann or len(patch) > 1:
            core.patch_node(node.metadata.name, {"metadata": {"annotations": patch}})


def test_fault_remediation_suite_passes_on_sim(gpu_health_cluster: Any) -> None:
    from gpucatalog.validators.conformance import base, fault_remediation

    logs: list[str] = []
    ctx = base.SuiteContext(
        kubeconfig=gpu_health_cluster.kubeconfig(),
        params={"inject_fault": gpu_health_cluster.inject_fault, "gpu_health_namespace": NAMESPACE},
        log=lambda m: logs.append(f"{time.strftime('%H:%M:%S')} {m}"),
    )
    result = fault_remediation.run(ctx)
    failed = [(c.name, c.reason) for c in result.cases if c.result != "passed"]
    print("\n".join(logs))
    for c in result.cases:
        print(c.name, c.result, round(c.seconds, 1), c.details)
    assert not failed, failed
