"""Readiness gates against a real API server (statuses written as controllers and a kubelet
would): a component's workloads must have their pods ready and KAI's Config must report ready;
time runs out naming what is not; a gate whose pods are only simulated (no container IDs, as
kwok leaves them) is skipped only when certification asks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.catalog import readiness
from gpucatalog.core import executor
from gpucatalog.toolchain import build
from gpucatalog.validators.conformance.kit import kube_client
from tests.validators.conformance.apiserver import api_server

pytestmark = pytest.mark.integration
CRDS = Path(__file__).resolve().parents[2] / "charts/kai-scheduler/crds"


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, kube_client.Kube]]:
    with api_server(tmp_path_factory.mktemp("apiserver")) as kc:
        kubectl = build.ensure("kubectl")
        executor.run([kubectl, "--kubeconfig", kc, "apply", "--server-side", "-f", CRDS])
        executor.run([kubectl, "--kubeconfig", kc, "wait", "--for=condition=Established", "crd", "--all",
                      "--timeout=60s"])
        k = kube_client.Kube(str(kc))
        yield kc, k
        k.close()


def _deployment(k: kube_client.Kube, ns: str, name: str, *, ready: int, container_id: str | None) -> dict[str, Any]:
    k.core.create_namespace({"metadata": {"name": ns}})
    k.core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    labels = {"app": name}
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}
    k.apps.create_namespaced_deployment(ns, body)
    k.apps.patch_namespaced_deployment_status(name, ns, {"status": {"replicas": 1, "readyReplicas": ready}})
    k.core.create_namespaced_pod(ns, {"metadata": {"name": f"{name}-0", "labels": labels},
                                      "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    status: dict[str, Any] = {"name": "c", "image": "registry.k8s.io/pause:3.10", "imageID": "", "ready": True,
                              "restartCount": 0, "state": {"running": {}}}
    if container_id:
        status["containerID"] = container_id
    k.core.patch_namespaced_pod_status(f"{name}-0", ns, {"status": {"phase": "Running", "containerStatuses": [status]}})
    return body


def test_a_workload_without_ready_pods_is_named_when_time_runs_out(kube: tuple[Path, kube_client.Kube]) -> None:
    kc, k = kube
    dep = _deployment(k, "gpu-health", "gpu-health-controller", ready=0, container_id="sim://1")
    t0 = time.monotonic()
    with pytest.raises(readiness.NotReady) as info:
        readiness.wait("gpu-health", "gpu-health", kc, 2, interval=0.2, objects=[dep])
    assert time.monotonic() - t0 < 10
    assert str(info.value) == ("gpu-health not ready after 2s: "
                               "Deployment gpu-health/gpu-health-controller: 0/1 pods ready")
    assert info.value.component == "gpu-health"
    k.apps.patch_namespaced_deployment_status("gpu-health-controller", "gpu-health", {"status": {"readyReplicas": 1}})
    assert readiness.wait("gpu-health", "gpu-health", kc, 2, interval=0.2, objects=[dep]) == "ready"


def test_kai_gate_names_the_config_and_is_skipped_only_for_simulated_pods(kube: tuple[Path, kube_client.Kube]) -> None:
    kc, k = kube
    dep = _deployment(k, "kai-scheduler", "kai-operator", ready=1, container_id=None)  # kwok's pods: no container ID
    with pytest.raises(readiness.NotReady) as info:
        readiness.wait("kai-scheduler", "kai-scheduler", kc, 1, interval=0.2, objects=[dep])
    assert "Config kai-config (kai.scheduler/v1) does not exist" in str(info.value)
    assert "Deployment kai-scheduler/binder: missing" in str(info.value)
    assert readiness.wait("kai-scheduler", "kai-scheduler", kc, 1, interval=0.2, objects=[dep],
                          skip_simulated=True) == "simulated"
    # The operator really runs (a kubelet gave its container an ID): the gate holds.
    k.core.patch_namespaced_pod_status("kai-operator-0", "kai-scheduler", {"status": {"containerStatuses": [{
        "name": "c", "image": "registry.k8s.io/pause:3.10", "imageID": "sim://x", "containerID": "sim://42",
        "ready": True, "restartCount": 0, "state": {"running": {}}}]}})
    with pytest.raises(readiness.NotReady) as info:
        readiness.wait("kai-scheduler", "kai-scheduler", kc, 1, interval=0.2, objects=[dep], skip_simulated=True)
    assert "Config kai-config (kai.scheduler/v1) does not exist" in str(info.value)


def test_a_container_failing_at_every_start_is_named_and_one_that_recovers_is_not(
        kube: tuple[Path, kube_client.Kube]) -> None:
    _kc, k = kube
    dep = _deployment(k, "kueue-crash", "kueue-controller-manager", ready=0, container_id="sim://2")
    api = k.api
    assert readiness.crash_loops(api, "kueue-crash", [dep]) == []
    looping = {"name": "c", "image": "registry.k8s.io/pause:3.10", "imageID": "", "ready": False,
               "restartCount": readiness.CRASH_RESTARTS,
               "state": {"waiting": {"reason": "CrashLoopBackOff"}},
               "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    k.core.patch_namespaced_pod_status("kueue-controller-manager-0", "kueue-crash",
                                       {"status": {"containerStatuses": [looping]}})
    assert readiness.crash_loops(api, "kueue-crash", [dep]) == [
        "Deployment kueue-crash/kueue-controller-manager: pod kueue-controller-manager-0 container c is crash-looping "
        f"({readiness.CRASH_RESTARTS} restarts, last exit code 1 (Error), CrashLoopBackOff)"]
    # as many restarts, running again now (it waited out a dependency): not a crash loop
    k.core.patch_namespaced_pod_status("kueue-controller-manager-0", "kueue-crash", {"status": {"containerStatuses": [
        {**looping, "ready": True, "state": {"running": {}}}]}})
    assert readiness.crash_loops(api, "kueue-crash", [dep]) == []
    # a pod the install found already there (a broken version's, being replaced) is not judged
    uids = readiness.pod_uids(api, "kueue-crash", [dep])
    assert len(uids) == 1
    k.core.patch_namespaced_pod_status("kueue-controller-manager-0", "kueue-crash", {"status": {"containerStatuses": [
        looping]}})
    assert readiness.crash_loops(api, "kueue-crash", [dep], before=uids) == []
    # fewer restarts than that: still starting
    k.core.patch_namespaced_pod_status("kueue-controller-manager-0", "kueue-crash", {"status": {"containerStatuses": [
        {**looping, "restartCount": readiness.CRASH_RESTARTS - 1}]}})
    assert readiness.crash_loops(api, "kueue-crash", [dep]) == []
