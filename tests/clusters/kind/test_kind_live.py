"""kind for real (``@pytest.mark.kind``): a cluster on the Docker engine `make setup` starts, its
node image built here from pinned sources. Real kubelets, containerd and runc: gpu-queueing 0.4.4
certified on kind with 4 GPU workers (accelerator metrics from gpu-health's real agent reading the
simulated node hardware; fault remediation, faults injected into that hardware and repaired by
gpu-health's repair-pod hook in a pod on the broken node; DRA sharing through the stand-in kubelet
plugin the real kubelet registers and calls); then, on the kept cluster, a claim's CDI
device reaching a container, and pods on different workers talking over the pod network and
through a Service name resolved by CoreDNS.

One cluster, on one worker: the certification keeps it, the checks run on it, then it goes."""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.cli import main
from gpucatalog.clusters.kind import cluster, images, nodeimage
from gpucatalog.core import kubeapi
from gpucatalog.pipelines import keys

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1500)]
GPU_HEALTH = "ghcr.io/gpu-catalog/gpu-health:0.1.0"  # python3 on Debian: a server and a client
DRA_IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0"


@pytest.fixture(scope="module")
def engine_up() -> None:
    prov = cluster.KindCluster("probe")
    if not prov.available():
        pytest.skip(prov.reason())


def _pod(name: str, node: str, command: list[str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [
                {"name": "c", "image": GPU_HEALTH, "imagePullPolicy": "Never", "command": command}]}}


def _wait_phase(core: Any, name: str, phases: set[str], timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    pod = None
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, "default")
        if pod.status.phase in phases:
            return pod
        time.sleep(0.5)
    raise AssertionError(f"pod {name} not {phases} after {timeout} s: {pod.status if pod else None}")


def _controller_log(core: Any) -> str:
    return "".join(core.read_namespaced_pod_log(p.metadata.name, "gpu-health") for p in
                   core.list_namespaced_pod("gpu-health", label_selector="app.kubernetes.io/component=controller").items)


def test_certify_on_kind_then_pods_on_two_workers_talk_over_the_pod_network(
        engine_up: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kubernetes import client

    # quota_reclaim and gang run on kind too (docs/kind.md), kept out of make test for time: they
    # exercise Kueue's decisions, which the sim runs as well; these three reach the kubelet and the node
    name = f"certk-{uuid.uuid4().hex[:6]}"
    prov = cluster.KindCluster(name)
    key = keys.generate(tmp_path / "keys", "ci")
    try:
        rc = main(["certify", "gpu-queueing@0.4.4", "--cluster", "kind", "--cluster-name", name,
                   "--suite", "accelerator_metrics", "--suite", "fault_remediation", "--suite", "gpu_sharing_dra",
                   "--keep-cluster",
                   "--signing-key", str(key.private_path), "--evidence", str(tmp_path / "ev"), "--json"])
        captured = capsys.readouterr()
        sys.stderr.write(captured.err)  # certify's progress, shown again should the test fail
        out = json.loads(captured.out)
        suites = {s["name"]: s for s in out["suites"]}
        failed = [(s, c["name"], c["reason"]) for s in suites.values() for c in s["cases"] if c["result"] != "passed"]
        if failed:  # the cluster is kept: gpu-health's controller log says what it did, step by step
            log = _controller_log(client.CoreV1Api(kubeapi.client_for(prov.kubeconfig())))
            pytest.fail(f"{failed}\n--- gpu-health controller log (tail) ---\n{log[-6000:]}")
        assert rc == 0 and out["result"] == "passed", out
        assert [c["name"] for c in suites["fault_remediation"]["cases"]] == [
            "agents_report_conditions", "idle_gpus_never_quarantined", "xid79_cordon_drain_repair_verify_uncordon",
            "application_xid_event_no_cordon", "pending_row_remap_gpu_reset", "failed_row_remap_hardware_repair",
            "ib_port_half_rate_detected", "busy_narrowed_pcie_link_quarantined",
            "breaker_caps_quarantines_when_most_nodes_fault", "manual_cordon_never_uncordoned"]
        dra_cases = {c["name"]: c for c in suites["gpu_sharing_dra"]["cases"]}
        assert dra_cases["quarantined_gpu_never_allocated"]["result"] == "passed"  # run, not skipped
        (metrics,) = suites["accelerator_metrics"]["cases"]
        assert metrics["result"] == "passed"
        assert out["cluster"]["faultInjection"] == "kind"
        live, simulated = out["cluster"]["live"], out["cluster"]["simulated"]
        assert any("real kubelet, containerd and control plane" in line for line in live), live
        assert any(line.startswith("image registry.k8s.io/kueue/kueue:v0.17.0 built locally from "
                                   "sigs.k8s.io/kueue@v0.17.0") for line in live), live
        assert any(line.startswith(f"image {GPU_HEALTH} built locally") for line in live), live
        assert any(line.startswith(f"image {images.PAUSE_REF} built locally") for line in live), live
        assert any("nvidia.com/gpu capacity patched" in line for line in simulated), simulated
        assert any(line.startswith(f"image {DRA_IMAGE} built locally from SIMULATED stand-in") for line in simulated)
        assert not any(DRA_IMAGE in line for line in live), live

        # the kept cluster: real nodes on the node image built here, then pod traffic between workers
        st = json.loads((prov.state / "state.json").read_text())
        assert st["imageLock"]["images"] and st["image"].startswith(nodeimage.REGISTRY + "/kind-node:v1.36.3-")
        core: Any = client.CoreV1Api(kubeapi.client_for(prov.kubeconfig()))
        nodes = core.list_node().items
        assert len(nodes) == 5 and {str(n.status.node_info.kubelet_version) for n in nodes} == {"v1.36.3"}
        assert {str(n.status.node_info.container_runtime_version) for n in nodes} == {"containerd://2.3.4"}
        workers = sorted(n.metadata.name for n in nodes if (n.status.allocatable or {}).get("nvidia.com/gpu") == "8")
        assert len(workers) == 4
        # the repairs ran in pods on the broken nodes: the controller recorded each pod's message
        controller_log = _controller_log(core)
        repairs = [line for line in controller_log.splitlines() if "repair finished" in line
                   and ("action=RESET_GPU" in line or "action=REBOOT" in line)]
        assert repairs and all("detail=exit 0: pod gpu-health-repair-gpucatalog-" in line
                               and "exit 0: simulated repair of gpucatalog-" in line for line in repairs), controller_log[-3000:]
        core.create_namespaced_pod("default", _pod("server", workers[0], ["python3", "-m", "http.server", "8080"],
                                                   {"app": "server"}))
        core.create_namespaced_service("default", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                                                   "spec": {"selector": {"app": "server"},
                                                            "ports": [{"port": 80, "targetPort": 8080}]}})
        server = _wait_phase(core, "server", {"Running"})
        # the client on the other worker: the server's pod IP directly, then the Service by name
        # (CoreDNS, kube-proxy); each tried until it answers, for up to a minute
        fetch = ("import sys, time, urllib.request as u\n"
                 "for url in sys.argv[1:]:\n"
                 "    for i in range(60):\n"
                 "        try: u.urlopen(url, timeout=2).read(); print('ok', url); break\n"
                 "        except OSError as e: err = e; time.sleep(1)\n"
                 "    else: sys.exit(f'{url}: {err}')\n")
        core.create_namespaced_pod("default", _pod("client", workers[1], [
            "python3", "-c", fetch, f"http://{server.status.pod_ip}:8080/", "http://web.default.svc.cluster.local/"]))
        done = _wait_phase(core, "client", {"Succeeded", "Failed"})
        log = core.read_namespaced_pod_log("client", "default")
        assert done.status.phase == "Succeeded", log
        assert log.count("ok ") == 2, log
        assert server.spec.node_name != done.spec.node_name
        # a claim of the driver's class: kube-scheduler allocates, the kubelet asks the stand-in
        # to prepare it, containerd applies the CDI device it names: the container sees its GPU
        custom: Any = client.CustomObjectsApi(kubeapi.client_for(prov.kubeconfig()))
        custom.create_namespaced_custom_object("resource.k8s.io", "v1", "default", "resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "one-gpu"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
        claimer = _pod("claimer", "", ["sh", "-c", "env | grep ^GPU_CATALOG_SIM_GPU_"])
        del claimer["spec"]["nodeName"]
        claimer["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "one-gpu"}]
        claimer["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        core.create_namespaced_pod("default", claimer)
        ran = _wait_phase(core, "claimer", {"Succeeded", "Failed"})
        env = core.read_namespaced_pod_log("claimer", "default")
        assert ran.status.phase == "Succeeded", env
        line = env.splitlines()[0]
        assert line.split("=", 1)[1].startswith(f"{ran.spec.node_name}/gpu-"), env

        logs = prov.collect_logs(tmp_path / "logs")
        assert (logs / "nodes.yaml").is_file() and any(logs.rglob("kubelet.log"))
    finally:
        prov.down()
    assert not prov.exists() and not prov.state.exists()
