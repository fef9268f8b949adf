"""The queueing contract on a live Kueue (the pinned manager run by the sim kubelet, installed from
the gpu-queueing bundle): the gang suite passes, and the contract can fail — a cohort without
borrowing fails the borrowing case, preemption switched off fails reclaim, and Kueue's manager
killed mid-case fails that case with the cause while the next one starts clean. The scale suite on
all 16 GPUs: every case passes its thresholds, and every case fails a threshold tighter than what
it measured. On the same cluster,
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
from gpucatalog.validators.conformance.queueing_suites import gang, scale
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


SCALE = {"jobs": 16, "teams": 2, "backlog": 1.5, "reclaim_samples": 3, "large_job_gpus": 8, "distributed_pods": 12,
         "wait_seconds": 120, "poll_seconds": 0.5}


def test_scale_suite_passes_its_thresholds_and_fails_tighter_ones(kueue_cluster: Path, bundle: render.RenderedBundle) -> None:
    loose = {k: 300 for k in ("fill_s", "fill_with_backlog_s", "reclaim_one_gpu_p95_s", "large_job_reclaim_s",
                              "distributed_job_s")}
    result = scale.run(_ctx(kueue_cluster, bundle, **SCALE, thresholds=loose))
    by_name = {c.name: c for c in result.cases}
    assert result.result == "passed", [(c.name, c.reason) for c in result.cases]
    fill = by_name["fill_single_gpu_jobs"].details
    assert fill["units"] == fill["gpus"] == 16 and fill["peak_running"] == 16
    # the report's plot: per team, units running over time, ending with the team's whole share
    assert sorted(fill["series"]) == ["t0", "t1"] and all(pts[-1][1] == 8 for pts in fill["series"].values())
    # the cluster's floor for as many pods, measured first, and the stack's time above it
    assert fill["floor"]["pods"] == 16 and 0 < fill["floor"]["seconds"] < fill["fill_s"]
    assert fill["over_floor_s"] == pytest.approx(fill["fill_s"] - fill["floor"]["seconds"], abs=0.02)
    backlog = by_name["fill_with_backlog"].details
    assert backlog["units"] == 24 and backlog["peak_running"] == 16
    assert by_name["reclaim_one_gpu_when_full"].details["latency"]["count"] == 3
    large = by_name["reclaim_large_job"].details
    assert (large["quota_a"], large["quota_b"], large["job_pods"], large["a_left"]) == (8, 8, 8, 8)
    assert by_name["distributed_job_allocation"].details["nodes"] == 2  # 12 pods need both nodes
    figures = {n: c.details["figure"]["name"] for n, c in by_name.items() if "figure" in c.details}
    assert sorted(figures.values()) == sorted(loose)
    # a threshold no cluster meets (1 ms: one API round trip takes longer): every case fails, naming
    # both figures; this time on a pool of one node's 8 GPUs, the other node cordoned for each case
    tight = dict.fromkeys(loose, 0.001)
    again = {c.name: c for c in scale.run(_ctx(kueue_cluster, bundle, **{**SCALE, "gpus": 8}, thresholds=tight)).cases}
    assert again["preflight"].result == "passed"
    for name, key in figures.items():
        assert again[name].result == "failed", (name, again[name].reason)
        assert again[name].reason.startswith(f"{key} ") and "above the bundle's threshold of 0.001s" in again[name].reason
        assert again[name].details["pool"] == {"gpus": 8, "nodes": 1, "cordoned_nodes": 1}
    assert again["fill_single_gpu_jobs"].details["units"] == 8
    assert again["fill_single_gpu_jobs"].details["floor"]["pods"] == 8  # the floor fits the pool of 8 too
    kube = kube_client.Kube(kueue_cluster)
    assert not [n.metadata.name for n in kube.core.list_node().items if n.spec.unschedulable]  # uncordoned after
    kube.close()

def test_scale_suite_without_thresholds_fails_its_preflight_naming_the_field(
        kueue_cluster: Path, bundle: render.RenderedBundle) -> None:
    result = scale.run(_ctx(kueue_cluster, bundle, **SCALE))
    pre = result.cases[0]
    assert pre.result == "failed" and "suiteParams.scale.thresholds is missing" in pre.reason
    assert {c.result for c in result.cases[1:]} == {"skipped"}
