"""The KAI CRDs and suites against a real kube-apiserver (no nodes, no KAI): the CRDs are
accepted, strict decoding rejects a wrong Queue field, the suites' workspaces create and remove
real queues, and every suite fails at its preflight in seconds, naming what is missing."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

import pytest
import yaml

from gpucatalog.core import executor
from gpucatalog.toolchain import build
from gpucatalog.validators.conformance import SUITES
from gpucatalog.validators.conformance.kai import params as kai_params
from gpucatalog.validators.conformance.kai import pods as kai_pods
from gpucatalog.validators.conformance.kai import preflight as kai_preflight
from gpucatalog.validators.conformance.kai import workspace as kai_workspace
from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client

pytestmark = pytest.mark.integration


def kubectl_apply(kc: Path, doc: dict[str, object]) -> str:
    proc = executor.run([build.ensure("kubectl"), "--kubeconfig", kc, "apply", "--validate=strict", "-f", "-"],
                        input=yaml.safe_dump(doc), check=False)
    return proc.stdout + proc.stderr


def test_crds_are_structural_and_strict(kubeconfig: Path) -> None:
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "strict"},
             "spec": {"resources": {"gpu": {"quota": 1, "overQuotaWeight": 1, "limit": -1}}}}
    assert "created" in kubectl_apply(kubeconfig, queue)
    queue["spec"]["resources"]["gpu"]["quotta"] = 2  # type: ignore[index]
    assert 'unknown field "spec.resources.gpu.quotta"' in kubectl_apply(kubeconfig, queue)


@pytest.mark.parametrize("name", ["fractional_gpu", "gang", "quota_reclaim"])
def test_suite_fails_fast_naming_what_is_missing(kubeconfig: Path, name: str) -> None:
    ctx = base.SuiteContext(kubeconfig=kubeconfig)
    t0 = time.monotonic()
    result = importlib.import_module(SUITES[name]).run(ctx)
    assert time.monotonic() - t0 < 15
    assert result.result == "failed"
    pre, *rest = result.cases
    assert pre.name == "preflight" and pre.result == "failed"
    assert "Deployment kai-scheduler/kai-scheduler-default does not exist" in pre.reason
    assert "Deployment kai-scheduler/binder does not exist" in pre.reason
    assert "Config kai-config (kai.scheduler/v1) does not exist" in pre.reason
    assert "0 allocatable nvidia.com/gpu" in pre.reason
    assert rest and all(c.result == "skipped" and "preflight failed" in c.reason for c in rest)


def test_workspace_queues_are_real_and_cleaned_up(kubeconfig: Path) -> None:
    kube = kube_client.Kube(str(kubeconfig))
    p = kai_params.Params()
    res = base.CaseResult("ws", "passed")
    with kai_workspace.workspace(kube, p, "t", res) as ws:
        root = ws.queue(f"{ws.ns}-root", quota=4)
        ws.queue(f"{ws.ns}-leaf", parent=root, quota=2, weight=2)
        body = kai_pods.pin(kai_pods.pod(p, "frac", f"{ws.ns}-leaf", group="g", fraction=0.5), ["n1"])
        ws.create(body)
        (created,) = ws.pods(f"{base.SUITE_LABEL}=g")
        assert created.spec.scheduler_name == "kai-scheduler"
        assert created.metadata.annotations["gpu-fraction"] == "0.5"
        assert created.metadata.labels["kai.scheduler/queue"] == f"{ws.ns}-leaf"
        names = {q["metadata"]["name"] for q in kube.custom.list_cluster_custom_object(
            "scheduling.run.ai", "v2", "queues")["items"]}
        assert {f"{ws.ns}-root", f"{ws.ns}-leaf"} <= names
        ns = ws.ns
    names = {q["metadata"]["name"] for q in kube.custom.list_cluster_custom_object(
        "scheduling.run.ai", "v2", "queues")["items"]}
    assert not {n for n in names if n.startswith(ns)}
    assert "cleanup_problems" not in res.details
    kube.close()


def _kai_pod(kube: kube_client.Kube, name: str, app: str) -> None:
    body = {"metadata": {"name": name, "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    kube.core.create_namespaced_pod("kai-scheduler", body)


def _pod_status(kube: kube_client.Kube, name: str, *, ready: bool, restarts: int, waiting: str = "") -> None:
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
    status = {"phase": "Running", "containerStatuses": [{
        "name": "c", "image": "registry.k8s.io/pause:3.10", "imageID": "", "ready": ready,
        "restartCount": restarts, "state": state}]}
    kube.core.patch_namespaced_pod_status(name, "kai-scheduler", {"status": status})


def test_preflight_names_a_crashing_component_and_the_watchdog_fails_on_restart(kubeconfig: Path) -> None:
    """KAI's status as the API reports it (pod statuses written here as a kubelet would): a
    Deployment without ready pods is named with its pod's waiting reason, and a restart during
    a wait fails the wait at once instead of letting it time out."""
    kube = kube_client.Kube(str(kubeconfig))
    p = kai_params.Params(wait_seconds=60)
    kube.core.create_namespace({"metadata": {"name": "kai-scheduler"}})
    kube.core.create_namespaced_service_account("kai-scheduler", {"metadata": {"name": "default"}})
    labels = {"app": "binder"}
    kube.apps.create_namespaced_deployment("kai-scheduler", {
        "metadata": {"name": "binder"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}})
    _kai_pod(kube, "binder-0", "binder")
    _pod_status(kube, "binder-0", ready=False, restarts=4, waiting="CrashLoopBackOff")
    kube.custom.create_cluster_custom_object("kai.scheduler", "v1", "configs", {
        "apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"}, "spec": {}})
    kube.custom.patch_cluster_custom_object_status("kai.scheduler", "v1", "configs", "kai-config", {"status": {
        "conditions": [{"type": "Deployed", "status": "True", "reason": "Deployed", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
                       {"type": "Available", "status": "False", "reason": "Unavailable", "message": "binder not ready",
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}})
    with pytest.raises(base.CaseFailed) as info:
        kai_preflight.preflight(kube, p, ["binder"], min_gpus=0)
    assert ("Config kai-config: Available=False (Unavailable: binder not ready); "
            "DependenciesFulfilled not reported") in str(info.value)
    assert ("KAI binder: Deployment kai-scheduler/binder has 0/1 ready replicas "
            "(pod binder-0: CrashLoopBackOff, 4 restarts)") in str(info.value)

    _pod_status(kube, "binder-0", ready=True, restarts=4)
    dog = kai_preflight.Watchdog(kube, p, ["binder"])
    dog.check()
    _pod_status(kube, "binder-0", ready=True, restarts=5)
    t0 = time.monotonic()
    with pytest.raises(base.CaseFailed) as info:
        kai_preflight.wait(dog, "something that never happens", lambda: None, timeout=60)
    assert time.monotonic() - t0 < 10
    assert "KAI binder crashed during the case: pod kai-scheduler/binder-0 restarted (4 -> 5 restarts)" in str(info.value)
    kube.close()


def test_suite_plumbing_against_the_api(kubeconfig: Path) -> None:
    """Every API call the suites make, on real objects: GPU nodes and what is free on them,
    explicit PodGroups, Jobs, BindRequest and PodGroup listings, and reading a fraction pod's
    placement from its GPU-group label and the reservation pod's GPU report."""
    from gpucatalog.validators.conformance.kai import adapter as kai_adapter
    from gpucatalog.validators.conformance.queueing import contract as queueing_contract

    kube = kube_client.Kube(str(kubeconfig))
    p = kai_params.Params(wait_seconds=30)
    kube.core.create_node({"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.memory": "81920"}}})
    kube.core.patch_node_status("gpu-1", {"status": {
        "capacity": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
        "allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"}}})
    assert gpu_inventory.gpu_capacity(kube) == {"gpu-1": 8}
    assert gpu_inventory.gpu_memory_mib(kube) == {"gpu-1": 81920}

    res = base.CaseResult("plumbing", "passed")
    with kai_workspace.workspace(kube, p, "plumb", res) as ws:
        sp = kai_adapter.KaiSpace(kube, p, ws)
        sp.build(queueing_contract.Dept("root", 2, (queueing_contract.Team("q", 2),)))
        q = sp.queue["q"]
        assert q == f"{ws.ns}-q" and ws.queues == [f"{ws.ns}-root", q]
        sp.gang("q", "gang", 2, "gpu-1")
        whole = ws.pods(f"{base.SUITE_LABEL}=gang")
        assert len(whole) == 2 and all(x.metadata.annotations["pod-group-name"] == "gang" for x in whole)
        assert sp.started("gang") == [] and sp.held_back("gang") == [] and sp.units("gang") == 2
        assert sp.extras("non_preemptible_stays_within_quota") == {"podgroup_reasons": []}
        assert sp.gang_unit("gang") == {"kind": "PodGroup", "name": "gang", "members": 2}
        # Bind one whole-GPU pod as a scheduler would; it now counts against the node.
        kube.core.create_namespaced_binding(ws.ns, {"metadata": {"name": "gang-0"},
                                                    "target": {"kind": "Node", "name": "gpu-1"}},
                                         _preload_content=False)
        assert sp.started("gang") == ["pod gang-0 on gpu-1"]
        assert [x.metadata.name for x in sp.scheduled("gang")] == ["gang-0"]
        assert gpu_inventory.free_gpus(kube) == {"gpu-1": 7}
        # A fraction pod in GPU group g1, and the reservation pod that reports the GPU's id.
        ws.create(kai_pods.pod(p, "frac", q, group="frac", fraction=0.25))
        kube.core.patch_namespaced_pod("frac", ws.ns, {"metadata": {"labels": {"runai-gpu-group": "g1"}}})
        kube.core.create_namespaced_binding(ws.ns, {"metadata": {"name": "frac"},
                                                    "target": {"kind": "Node", "name": "gpu-1"}},
                                         _preload_content=False)
        if not kube.exists("rr ns", kube.core.read_namespace, p.reservation_namespace):
            kube.core.create_namespace({"metadata": {"name": p.reservation_namespace}})
            kube.core.create_namespaced_service_account(p.reservation_namespace, {"metadata": {"name": "default"}})
        kube.core.create_namespaced_pod(p.reservation_namespace, {
            "metadata": {"name": "gpu-reservation-1", "labels": {"runai-gpu-group": "g1"},
                         "annotations": {"run.ai/reserve_for_gpu_index": "GPU-0000"}},
            "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
        memory = gpu_inventory.gpu_memory_mib(kube)
        placed = {x.metadata.name: kai_pods.placement(kube, p, x, memory)
                  for x in ws.pods(base.SUITE_LABEL) if kai_pods.is_scheduled(x)}
        assert placed["frac"].to_dict() == {"pod": "frac", "node": "gpu-1", "gpu": "g1/GPU-0000",
                                            "fraction": 0.25, "gpus": None}
        assert placed["gang-0"].gpus == 1
        assert gpu_inventory.free_gpus(kube) == {"gpu-1": 6}  # the reservation pod holds one device
        # A Job body as job_with_batch_min_member builds it is accepted.
        job = kube.batch.create_namespaced_job(ws.ns, kai_adapter.job_body(p, "j", q, "gpu-1", 2))
        assert job.metadata.annotations["kai.scheduler/batch-min-member"] == "2"
        # KAI's binder releases the shared GPU (cleanup waits for that); here the test does.
        kube.core.delete_namespaced_pod("gpu-reservation-1", p.reservation_namespace, grace_period_seconds=0)
    assert "cleanup_problems" not in res.details, res.details
    kube.core.delete_node("gpu-1")
    kube.close()
