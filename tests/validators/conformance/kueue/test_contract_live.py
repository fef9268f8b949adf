"""The queueing contract on a live Kueue (the pinned manager run by the sim kubelet, installed from
the gpu-queueing bundle): the gang suite passes, and the contract can fail — a cohort without
borrowing fails the borrowing case, preemption switched off fails reclaim, and Kueue's manager
killed mid-case fails that case with the cause while the next one starts clean. On the same cluster,
the fill-every-GPU-then-one-more scenario (tests/clusters/sim/fill.py): the extra Job's pod stays
Pending, Unschedulable, under kube-scheduler alone and under Kueue."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpucatalog.catalog import install, loader, render
from gpucatalog.clusters.sim import SimCluster, rootfs
from gpucatalog.validators.conformance.kit import base, kube_client
from gpucatalog.validators.conformance.kueue import adapter as kueue_adapter
from gpucatalog.validators.conformance.kueue import space as kueue_space
from gpucatalog.validators.conformance.queueing import contract as queueing_contract
from gpucatalog.validators.conformance.queueing_suites import gang
from tests.clusters.sim import fill

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
REPO = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def bundle() -> render.RenderedBundle:
    rb = render.render_bundle(loader.load_catalog(REPO / "catalog"), "gpu-queueing@0.1.0", "sim")
    rb.components = [c for c in rb.components if c.name in ("kueue", "team-queues")]
    return rb


@pytest.fixture(scope="module")
def kueue_cluster(bundle: render.RenderedBundle) -> Iterator[Path]:
    cluster = SimCluster("kueue-contract")
    if cluster.layout.root.exists():  # a leftover of an interrupted run
        cluster.down()
    try:
        kc = cluster.up(2, "h100-80gb-x8")
        cluster.wait_ready(120)
        cluster.start_services([o for c in bundle.components for o in c.objects])
        install.install(bundle, kc, timeout_s=300, gates=False)
        yield kc
    finally:
        cluster.down()


def _ctx(kc: Path, rb: render.RenderedBundle, log: Any = None, **params: Any) -> base.SuiteContext:
    values = {c.name: c.values for c in rb.components}
    return base.SuiteContext(kubeconfig=kc, params={"bundle_values": values, **params},
                             log=log or (lambda _m: None))


def _reclaim(kc: Path, rb: render.RenderedBundle, **params: Any) -> base.CaseResult:
    ctx = _ctx(kc, rb, reclaim_rounds=1, wait_seconds=30, **params)
    result = queueing_contract.run("quota_reclaim", ctx, kueue_adapter.KueueAdapter(ctx), ("reclaim_borrowed_gpus",))
    pre, case = result.cases
    assert pre.result == "passed", pre.reason
    return case


def test_gang_suite_passes_on_live_kueue(kueue_cluster: Path, bundle: render.RenderedBundle) -> None:
    result = gang.run(_ctx(kueue_cluster, bundle))
    assert result.result == "passed", [(c.name, c.reason) for c in result.cases]
    by_name = {c.name: c for c in result.cases}
    assert by_name["preflight"].details["kueue_image"] == "registry.k8s.io/kueue/kueue:v0.17.0"
    assert by_name["gang_with_room_starts_together"].details["all_scheduled_after_s"] > 0
    short = by_name["gang_short_of_one_gpu_starts_none_then_all"].details
    assert "insufficient unused quota" in short["held_back_reason"]
    assert by_name["job_with_batch_min_member"].details["unit"]["kind"] == "Workload"


def test_a_cohort_without_borrowing_fails_the_borrowing_case(kueue_cluster: Path, bundle: render.RenderedBundle) -> None:
    case = _reclaim(kueue_cluster, bundle, borrowing_limit=0)
    assert case.result == "failed"
    assert "waiting for team A to borrow B's idle quota and run 16 pods (round 1)" in case.reason


def test_preemption_switched_off_fails_reclaim(kueue_cluster: Path, bundle: render.RenderedBundle) -> None:
    case = _reclaim(kueue_cluster, bundle, cluster_queue_overrides={"preemption": {"reclaimWithinCohort": "Never"}})
    assert case.result == "failed"
    assert "waiting for team B's 8 in-quota pods to run by reclaiming from A (round 1)" in case.reason


def test_kueue_killed_mid_case_fails_that_case_and_the_next_starts_clean(
        kueue_cluster: Path, bundle: render.RenderedBundle) -> None:
    kube = kube_client.Kube(kueue_cluster)

    def kill_manager() -> None:
        time.sleep(4)  # inside the case's waits
        for pod in kube.core.list_namespaced_pod("kueue-system", label_selector=kueue_adapter.SELECTOR).items:
            kube.core.delete_namespaced_pod(pod.metadata.name, "kueue-system", grace_period_seconds=0)

    def log(msg: str) -> None:
        if msg.endswith("gang_short_of_one_gpu_starts_none_then_all: running"):
            threading.Thread(target=kill_manager, daemon=True).start()

    ctx = _ctx(kueue_cluster, bundle, log)
    result = queueing_contract.run("gang", ctx, kueue_adapter.KueueAdapter(ctx),
                                   ("gang_short_of_one_gpu_starts_none_then_all", "gang_with_room_starts_together"))
    _, killed, after = result.cases
    kube.close()
    assert killed.result == "failed" and "Kueue's controller manager" in killed.reason, killed.reason
    assert after.result == "passed", after.reason


@pytest.fixture()
def fill_ns(kueue_cluster: Path) -> Iterator[tuple[Any, str]]:
    kube = kube_client.Kube(kueue_cluster)
    ns = f"fill-{uuid.uuid4().hex[:5]}"
    kube.core.create_namespace({"metadata": {"name": ns}})
    try:
        yield kube, ns
    finally:
        for step in (lambda: kube.batch.delete_collection_namespaced_job(ns, propagation_policy="Background"),
                     lambda: kube.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0),
                     lambda: kube.core.delete_namespace(ns, propagation_policy="Background")):
            try:
                step()
            except client.ApiException as exc:  # the Kueue case's cleanup deleted the namespace already
                if exc.status != 404:
                    raise
        kube.close()


def test_every_gpu_full_then_one_more_stays_unschedulable_under_kube_scheduler(fill_ns: tuple[Any, str]) -> None:
    kube, ns = fill_ns
    seen = fill.fill_then_one_more(kube.api, ns)
    assert seen["fillers"] == 16 and "Insufficient nvidia.com/gpu" in seen["message"], seen
    if rootfs.available("busybox"):  # each filler a real process sleeping until deleted
        assert seen["real"] == 16, seen


def test_every_gpu_full_then_one_more_stays_unschedulable_under_kueue(fill_ns: tuple[Any, str]) -> None:
    kube, ns = fill_ns
    free = fill.free_gpus(kube.core, ns)
    assert free
    # quota for one more than the cluster holds: Kueue admits the extra Job, kube-scheduler finds no GPU
    sp = kueue_space.KueueSpace(kube, kueue_space.KueueParams(), ns)
    try:
        sp.build(queueing_contract.Dept("root", free + 1, (queueing_contract.Team("q", free + 1),)))
        seen = fill.fill_then_one_more(kube.api, ns, {kueue_space.QUEUE_LABEL: "q"})
        workloads = {w["metadata"]["ownerReferences"][0]["name"]: w for w in kube.custom.list_namespaced_custom_object(
            kueue_space.GROUP, kueue_space.VERSION, ns, "workloads")["items"]}
        admitted = {name for name, w in workloads.items()
                    if any(c["type"] == "Admitted" and c["status"] == "True" for c in w["status"].get("conditions", []))}
        assert admitted == set(workloads) and "one-more" in admitted, workloads.keys()
        assert "Insufficient nvidia.com/gpu" in seen["message"], seen
    finally:
        sp.cleanup()
