"""``gpu_sharing_dra`` against a real sim cluster (kube-scheduler 1.36.3 allocates): each case
passes with the slices NVIDIA's driver publishes and fails when the cluster misbehaves: GPUs
published without multiple allocations, counters that overstate a GPU, a driver that ignores
gpu-health's quarantine, a missing DeviceClass, a class that should not exist.

The slices are published by the sim publisher's own functions (no process), so each test picks
what the "driver" publishes; gpu-health's quarantine is played by labelling the node as it does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpucatalog.clusters import shapes
from gpucatalog.clusters.sim import dra, drapublisher, nodefs
from gpucatalog.clusters.sim.cluster import SimCluster
from gpucatalog.core import executor
from gpucatalog.toolchain import build
from gpucatalog.validators.conformance.dra import bad_claims as dra_bad_claims
from gpucatalog.validators.conformance.dra import gpu_sharing_dra as suite
from gpucatalog.validators.conformance.kit import base, kube_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
CHART = Path(__file__).resolve().parents[4] / "charts/nvidia-dra-driver"
SHAPE = shapes.get("h100-80gb-x8")


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    c = SimCluster(f"ptdra-{os.getpid()}")
    c.up(2, SHAPE.name)
    try:
        rendered = executor.run([build.ensure("helm"), "template", "dra", CHART, "--show-only",
                                 "templates/deviceclasses.yaml"]).stdout
        executor.run([build.ensure("kubectl"), "--kubeconfig", c.kubeconfig(), "apply", "-f", "-"], input=rendered)
        yield c
    finally:
        c.down()


class Driver:
    """Publishes the nodes' slices as the driver would, or as a broken one would (``tamper``)."""

    def __init__(self, c: SimCluster) -> None:
        self.c = c
        self.api: Any = client.CustomObjectsApi(c.api_client())
        self.core: Any = client.CoreV1Api(c.api_client())
        self.nodes = sorted(n.metadata.name for n in self.core.list_node().items)

    def publish(self, mode: str = "mixed", honour_quarantine: bool = True, tamper: Any = None) -> None:
        for node in self.nodes:
            labels = self.core.read_node(node).metadata.labels or {}
            state = labels.get(dra.HEALTH_STATE_LABEL, "healthy") if honour_quarantine else "healthy"
            gpus = nodefs.load_hw(self.c.node_dir(node))["gpus"]
            specs = dra.slice_specs(node, SHAPE, gpus, mode, state)
            if tamper is not None:
                tamper(specs)
            drapublisher.reconcile(self.api, node, specs)


def _ctx(c: SimCluster, **params: Any) -> base.SuiteContext:
    return base.SuiteContext(kubeconfig=c.kubeconfig(), params=params, timeout_scale=0.3)


def _run(fn: base.Case, ctx: base.SuiteContext) -> base.CaseResult:
    return base.run_cases("gpu_sharing_dra", ctx, [(fn.__name__, fn)]).cases[0]


def test_sharing_cases_pass_on_shared_gpus_and_fail_on_exclusive_ones(cluster: SimCluster) -> None:
    drv = Driver(cluster)
    drv.publish("mixed")
    ctx = _ctx(cluster)
    for case in (suite.preflight, suite.two_halves_share_one_gpu, suite.mixed_claims_within_capacity):
        r = _run(case, ctx)
        assert r.result == "passed", (case.__name__, r.reason)
    drv.publish("exclusive")  # the driver's default: one claim per GPU
    for case in (suite.two_halves_share_one_gpu, suite.delete_frees_share, suite.mixed_claims_within_capacity):
        r = _run(case, ctx)
        assert r.result == "failed" and "allowMultipleAllocations" in r.reason, (case.__name__, r.reason)


def test_partitions_fail_when_counters_overstate_the_gpu(cluster: SimCluster) -> None:
    drv = Driver(cluster)
    drv.publish("mixed")
    assert _run(suite.partitions_fill_gpu_exactly, _ctx(cluster)).result == "passed"

    def doubled(specs: list[dict[str, Any]]) -> None:  # a driver claiming each GPU twice over
        for cs in specs[0].get("sharedCounters", []):
            cs["counters"][dra.COMPUTE]["value"], cs["counters"][dra.MEMORY]["value"] = "14", "16"

    drv.publish("mixed", tamper=doubled)
    r = _run(suite.partitions_fill_gpu_exactly, _ctx(cluster))
    assert r.result == "failed" and "must stay pending" in r.reason, r.reason


def _health_injector(drv: Driver, honour: bool) -> Any:
    """gpu-health's part, as it shows on the node (state label + cordon), then the driver's."""
    def inject(node: str, kind: str, **_kw: Any) -> str:
        state, cordon = ("healthy", False) if kind == "clear" else ("hardware-repair", True)
        drv.core.patch_node(node, {"metadata": {"labels": {dra.HEALTH_STATE_LABEL: state}},
                                   "spec": {"unschedulable": cordon}})
        drv.publish("mixed", honour_quarantine=honour)
        return f"{node}: {kind}"
    return inject


def test_quarantine_case_passes_with_tainting_driver_and_fails_with_one_that_ignores_it(cluster: SimCluster) -> None:
    drv = Driver(cluster)
    drv.publish("mixed")
    r = _run(suite.quarantined_gpu_never_allocated, _ctx(cluster, inject_fault=_health_injector(drv, True)))
    assert r.result == "passed", r.reason
    assert r.details["allocated_after_return_to"] == r.details["node"]
    r = _run(suite.quarantined_gpu_never_allocated, _ctx(cluster, inject_fault=_health_injector(drv, False)))
    assert r.result == "failed" and "tainted" in r.reason, r.reason
    assert _run(suite.quarantined_gpu_never_allocated, _ctx(cluster)).result == "skipped"  # no injector: not run


def test_oversized_and_bad_claim_cases_fail_on_a_cluster_that_lacks_or_adds_classes(cluster: SimCluster) -> None:
    drv = Driver(cluster)
    drv.publish("mixed")
    ctx = _ctx(cluster)
    assert _run(suite.oversized_claim_never_schedules, ctx).result == "passed"
    r = _run(dra_bad_claims.case, ctx)
    assert r.result == "passed", r.reason
    assert dra_bad_claims.FIELD in r.details["wrong_units"]
    # a DeviceClass by the "missing" name that selects every GPU: the claim is allocated
    dc = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": dra_bad_claims.MISSING_CLASS},
          "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]}}
    drv.api.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", dc)
    try:
        r = _run(dra_bad_claims.case, ctx)
        assert r.result == "failed" and "must stay pending" in r.reason, r.reason
    finally:
        drv.api.delete_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", dra_bad_claims.MISSING_CLASS)
    # without the gpu.nvidia.com class the scheduler's reason is another one: the case says so
    gpu_class = drv.api.get_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", "gpu.nvidia.com")
    drv.api.delete_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", "gpu.nvidia.com")
    try:
        r = _run(suite.oversized_claim_never_schedules, ctx)
        assert r.result == "failed" and "without the scheduler's claim reason" in r.reason, r.reason
    finally:
        gpu_class["metadata"] = {"name": "gpu.nvidia.com"}
        drv.api.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", gpu_class)


def test_publisher_process_killed_leaves_its_slices_and_cases_still_run(cluster: SimCluster, tmp_path: Path) -> None:
    import signal
    import sys
    import time

    drv = Driver(cluster)
    node = drv.nodes[0]
    for n in drv.nodes:  # start from no slices: the process publishes its node's
        for o in drv.api.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices",
                                                    label_selector=f"{drapublisher.NODE_LABEL}={n}")["items"]:
            drv.api.delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", o["metadata"]["name"])
    proc = executor.spawn([sys.executable, "-m", "gpucatalog.clusters.sim.drapublisher", "--node-name", node,
                           "--driver-root", str(cluster.node_dir(node)), "--interval", "0.5"],
                          log_path=tmp_path / "publisher.log",
                          env={"KUBECONFIG": str(cluster.kubeconfig()), "GPU_SHARING_MODE": "mixed"})
    try:
        def published() -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = drv.api.list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices", label_selector=f"{drapublisher.NODE_LABEL}={node}")["items"]
            return items

        # the pool's slices are written one by one: take them once the publisher says it is whole
        base.wait_for("the publisher's pool published",
                      lambda: "published pool" in (tmp_path / "publisher.log").read_text(), 60)
        before = published()
        assert before
        time.sleep(1.5)  # a few rounds: nothing changes, nothing is republished
        assert [o["metadata"]["resourceVersion"] for o in published()] == [o["metadata"]["resourceVersion"] for o in before]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    time.sleep(2)
    assert [o["metadata"]["resourceVersion"] for o in published()] == [o["metadata"]["resourceVersion"] for o in before]
    ctx = base.SuiteContext(kubeconfig=cluster.kubeconfig())  # full timeouts: the pool was just recreated
    r = _run(suite.two_halves_share_one_gpu, ctx)  # the allocation runs without the publisher
    assert r.result == "passed", r.reason
    assert "published pool" in (tmp_path / "publisher.log").read_text()


def test_a_case_namespace_that_never_goes_fails_the_last_case(cluster: SimCluster) -> None:
    """A case's namespace goes while the next case runs; the suite waits for them all at its end,
    and one held by a finalizer fails the last case that ran, naming it."""
    kube = kube_client.Kube(cluster.kubeconfig())
    ctx = base.SuiteContext(kubeconfig=cluster.kubeconfig(), params={}, timeout_scale=0.1)
    held: list[str] = []

    def case(_ctx: base.SuiteContext, _res: base.CaseResult) -> None:
        with suite.ws.space(kube, ctx, "dra-ns-test") as sp:
            held.append(sp.ns)
            kube.request("PATCH", f"/api/v1/namespaces/{sp.ns}", {"metadata": {"finalizers": ["gpu-catalog.dev/test-hold"]}},
                         content_type="application/merge-patch+json")

    result = base.run_cases("dra-ns-test", ctx, [("first", case), ("second", lambda _c, _r: None)])
    try:
        assert [c.result for c in result.cases] == ["passed", "passed"]
        suite.ws.await_namespaces_gone(kube, ctx, "dra-ns-test", result)
        assert result.cases[1].result == "failed"
        assert "after the suite: timed out" in result.cases[1].reason and held[0] in result.cases[1].reason
    finally:
        kube.request("PATCH", f"/api/v1/namespaces/{held[0]}", {"metadata": {"finalizers": None}},
                     content_type="application/merge-patch+json")
    suite.ws.await_namespaces_gone(kube, ctx, "dra-ns-test", result)  # gone once released: nothing more fails
