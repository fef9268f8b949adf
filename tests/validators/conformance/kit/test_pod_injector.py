"""The pod injector's pod, built from the gpu-health agent DaemonSet the chart really renders (real
helm), and its outcomes read from the pod's status against a real API server. The bare API
server has no kubelet, so these tests play the kubelet's part by writing the pod status a
kubelet would write; the sim cluster runs the real pods (tests/gpuhealth/test_pod_injector_sim.py)."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.validators.conformance.kit import base, kube_client, pod_injector


def _agent(objects: list[dict[str, Any]]) -> pod_injector.AgentTemplate:
    agent = pod_injector.agent_template(objects)
    assert agent is not None
    return agent


def test_the_pod_copies_the_agents_image_host_root_and_kernel_log(render_chart: Callable[..., list[dict[str, Any]]]) -> None:
    agent = _agent(render_chart("gpu-health", {"agent": {"runtimeClassName": "nvidia"}}))
    assert agent.image == "ghcr.io/gpu-catalog/gpu-health:0.1.0"
    assert (agent.host_root, agent.kmsg_mount, agent.nvidia_smi) == ("/", "/dev/kmsg", "nvidia-smi")
    assert agent.kmsg_volume["hostPath"] == {"path": "/dev/kmsg", "type": "CharDevice"}
    pod = pod_injector.pod_manifest(agent, "gpu-7", ["--code", "79", "--gpu", "2"], "XID 79")
    spec = pod["spec"]
    c = spec["containers"][0]
    assert spec["nodeName"] == "gpu-7" and spec["restartPolicy"] == "Never"
    assert spec["tolerations"] == [{"operator": "Exists"}]  # a cordoned node too
    assert spec["serviceAccountName"] == pod_injector.SERVICE_ACCOUNT and spec["automountServiceAccountToken"] is False
    assert spec["runtimeClassName"] == "nvidia"  # nvidia-smi as the agent gets it
    assert c["image"] == agent.image and c["securityContext"]["privileged"] is True
    assert c["args"] == ["inject-xid", "--host-root=/", "--nvidia-smi=nvidia-smi", "--code", "79", "--gpu", "2"]
    assert c["volumeMounts"] == [{"name": "host-kmsg", "mountPath": "/dev/kmsg"}]  # read-write, the only host path
    assert spec["volumes"] == [agent.kmsg_volume]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in c["env"]
    assert pod["metadata"]["labels"]["gpu-catalog.io/synthetic-fault"] == "true"
    assert "not a hardware error" in pod["metadata"]["annotations"]["gpu-catalog.io/synthetic-fault"]


def test_a_host_root_elsewhere_is_followed(render_chart: Callable[..., list[dict[str, Any]]]) -> None:
    agent = _agent(render_chart("gpu-health", {"agent": {"hostRoot": "/host"}}))
    assert (agent.host_root, agent.kmsg_mount) == ("/host", "/host/dev/kmsg")


@pytest.mark.parametrize("image, ok", [
    ("ghcr.io/gpu-catalog/gpu-health:0.1.0", True), ("gpu-health@sha256:" + "a" * 64, True),
    ("gpu-health", False), ("gpu-health:latest", False), ("reg:5000/gpu-health", False), ("reg:5000/gpu-health:1", True),
])
def test_only_a_pinned_image_is_used(image: str, ok: bool) -> None:
    assert pod_injector.pinned(image) is ok


def test_an_unpinned_or_blind_agent_is_refused(render_chart: Callable[..., list[dict[str, Any]]]) -> None:
    objects = render_chart("gpu-health")
    ds = next(o for o in objects if o["kind"] == "DaemonSet")
    ds["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/gpu-catalog/gpu-health:latest"
    with pytest.raises(ValueError, match="image 'ghcr.io/gpu-catalog/gpu-health:latest' is not pinned"):
        pod_injector.agent_template(objects)
    with pytest.raises(ValueError, match="no hostPath volume is mounted where the agent reads the kernel log"):
        pod_injector.agent_template(render_chart("gpu-health", {"agent": {"hostPaths": {"kmsg": None}}}))
    assert pod_injector.agent_template(render_chart("team-queues")) is None


def test_other_fault_kinds_are_not_run() -> None:
    inj = pod_injector.PodInjector.__new__(pod_injector.PodInjector)
    with pytest.raises(base.CaseNotRun, match="pcie-downgrade needs the driver; the pod injector writes XID lines only"):
        inj.inject_fault("gpu-0", "pcie-downgrade", gpu=4)


@contextlib.contextmanager
def _beside(inj: pod_injector.PodInjector, stand_in: Callable[..., None], *args: Any) -> Iterator[None]:
    """``stand_in(*args, stop)`` (a kubelet or controller played by the test) on a thread while
    the block runs; then it is stopped and the injector closed."""
    stop = threading.Event()
    t = threading.Thread(target=stand_in, args=(*args, stop), daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(5)
        inj.close()


def _kubelet(kubeconfig: Path, ns: str, status: dict[str, Any], stop: threading.Event) -> None:
    """Plays the node's kubelet on the bare API server: every injector pod gets ``status``."""
    kube = kube_client.Kube(kubeconfig)
    while not stop.is_set():
        for p in kube.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
            if not (p.get("status") or {}).get("containerStatuses"):
                p["status"] = status
                kube.request("PUT", f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}/status", p, ok404=True)
        stop.wait(0.2)


def _terminated(code: int, message: str) -> dict[str, Any]:
    return {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [{
        "name": "inject", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}}}]}


@pytest.mark.parametrize("status, call, raises, says", [
    (_terminated(2, "gpu-health: /dev/kmsg is a real kernel log, which cannot be edited"), "clear", base.CaseNotRun,
     "cannot be cleared without the node's repair: gpu-health: /dev/kmsg is a real kernel log"),
    (_terminated(2, "gpu-health: --gpu 9: nvidia-smi lists no such GPU"), "xid", base.CaseFailed,
     "the fault injector pod on node-a failed (exit 2): gpu-health: --gpu 9"),
    ({"phase": "Pending", "containerStatuses": [{"name": "inject", "image": "x", "imageID": "", "ready": False,
                                                 "restartCount": 0, "state": {"waiting": {
                                                     "reason": "ImagePullBackOff", "message": "not found"}}}]},
     "xid", base.CaseFailed, "cannot start: ImagePullBackOff not found"),
    (_terminated(0, '{"record": "4,1,1,-;NVRM: Xid (PCI:0000:3a:00): 79"}'), "xid", None, "NVRM: Xid (PCI:0000:3a:00): 79"),
])
def test_the_pods_outcome_decides(kubeconfig: Path, render_chart: Callable[..., list[dict[str, Any]]],
                                  status: dict[str, Any], call: str, raises: type[Exception] | None, says: str) -> None:
    inj = _injector_in(kubeconfig, render_chart, "inj-test")
    kube = kube_client.Kube(kubeconfig)
    with _beside(inj, _kubelet, kubeconfig, "inj-test", status):
        def act() -> str:
            return inj.clear_fault("node-a") if call == "clear" else inj.inject_fault("node-a", "xid", code=79, gpu=2)
        if raises is None:
            assert says in act()
        else:
            with pytest.raises(raises) as exc:
                act()
            assert says in str(exc.value)
        # the pod is gone either way, and its ServiceAccount has no token mounted anywhere
        assert kube.request("GET", "/api/v1/namespaces/inj-test/pods")["items"] == []
        sa = kube.request("GET", f"/api/v1/namespaces/inj-test/serviceaccounts/{pod_injector.SERVICE_ACCOUNT}")
        assert sa["automountServiceAccountToken"] is False
    assert not kube.request("GET", f"/api/v1/namespaces/inj-test/serviceaccounts/{pod_injector.SERVICE_ACCOUNT}",
                            ok404=True)


def _draining_kubelet(kubeconfig: Path, ns: str, status: dict[str, Any] | None, stop: threading.Event) -> None:
    """Plays a node drained for the very fault its injector pod writes, faster than the injector
    reads: the pod is evicted, its kubelet writes its terminal ``status`` (none: it never ran) and
    removes it."""
    kube = kube_client.Kube(kubeconfig)
    while not stop.is_set():
        for p in kube.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
            path = f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}"
            # the eviction marks the pod deleted; its kubelet stops it, writes how it ended, removes it
            p = kube.request("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 30},
                             ok404=True)
            if status is not None and p.get("metadata"):
                p["status"] = status
                kube.request("PUT", f"{path}/status", p, ok404=True)
            kube.request("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                         ok404=True)
        stop.wait(0.05)


def _injector_in(kubeconfig: Path, render_chart: Callable[..., list[dict[str, Any]]], ns: str) -> pod_injector.PodInjector:
    """A pod injector for gpu-health's agent rendered into namespace ``ns`` (made if missing)."""
    objects = render_chart("gpu-health", None, "--namespace", ns)
    for o in objects:
        o["metadata"]["namespace"] = ns
    kube = kube_client.Kube(kubeconfig)
    if not kube.request("GET", f"/api/v1/namespaces/{ns}", ok404=True):
        kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return pod_injector.PodInjector(kubeconfig, _agent(objects), timeout_s=20)


@pytest.mark.parametrize("status, says", [
    # it wrote the fault, then the drain that fault caused removed it: the injection happened
    (_terminated(0, ""), None),
    # killed mid-run by the drain, on every try: the injection never finished
    (_terminated(143, ""), "was deleted (a drain of the node?) before it finished: exit 143 Error (3 pods in a row)"),
    # removed before its container ever ran (a pod still Pending is evicted despite the PDB), on
    # every try
    (None, "was deleted before it ran (a drain of the node?); last seen: {\"phase\": \"Pending\", \"reason\": null} "
           "(3 pods in a row)"),
])
def test_a_pod_removed_by_a_drain_is_judged_by_its_last_status(
        kubeconfig: Path, render_chart: Callable[..., list[dict[str, Any]]], status: dict[str, Any] | None,
        says: str | None) -> None:
    inj = _injector_in(kubeconfig, render_chart, "inj-drain")
    with _beside(inj, _draining_kubelet, kubeconfig, "inj-drain", status):
        if says is None:
            assert inj.inject_fault("node-a", "xid", code=79, gpu=2).startswith("node-a:")
            assert inj.runs[-1]["exitCode"] == 0 and inj.runs[-1]["deletedBeforeRead"] is True
        else:
            with pytest.raises(base.CaseFailed, match=r"the fault injector pod on node-a " + re.escape(says)):
                inj.inject_fault("node-a", "xid", code=79, gpu=2)


def _kubelet_behind_a_drain(kubeconfig: Path, ns: str, first: dict[str, Any] | None, seen: list[dict[str, Any]],
                            stop: threading.Event) -> None:
    """The first injector pod is removed by a drain: evicted while still Pending (``first`` None:
    no status, it may or may not have run) or killed mid-run (``first``: the terminal status its
    kubelet wrote); every later one runs to completion."""
    kube = kube_client.Kube(kubeconfig)
    while not stop.is_set():
        for p in kube.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
            path = f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}"
            if p["metadata"].get("deletionTimestamp") or (p.get("status") or {}).get("containerStatuses"):
                continue
            seen.append(p)
            if len(seen) == 1:
                if first is not None:
                    p = kube.request("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions",
                                                      "gracePeriodSeconds": 30}, ok404=True)
                    p["status"] = first
                    kube.request("PUT", f"{path}/status", p, ok404=True)
                kube.request("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                             ok404=True)
            else:
                p["status"] = _terminated(0, '{"record": "4,1,1,-;NVRM: Xid (PCI:0000:3a:00): 79"}')
                kube.request("PUT", f"{path}/status", p, ok404=True)
        stop.wait(0.05)


@pytest.mark.parametrize("first", [None, _terminated(143, "")], ids=["evicted-while-pending", "killed-mid-run"])
def test_a_pod_removed_by_a_drain_is_tried_again_with_the_same_injection_id(
        kubeconfig: Path, render_chart: Callable[..., list[dict[str, Any]]], first: dict[str, Any] | None) -> None:
    inj = _injector_in(kubeconfig, render_chart, "inj-retry")
    seen: list[dict[str, Any]] = []
    with _beside(inj, _kubelet_behind_a_drain, kubeconfig, "inj-retry", first, seen):
        assert "NVRM: Xid (PCI:0000:3a:00): 79" in inj.inject_fault("node-a", "xid", code=79, gpu=2)
    assert len(seen) == 2
    first_args, second_args = (p["spec"]["containers"][0]["args"] for p in seen)
    assert first_args == second_args and first_args[-2] == "--injection" and re.fullmatch(r"[0-9a-f]{8}", first_args[-1])
    assert [r.get("removedBeforeItReported", "") != "" for r in inj.runs] == [True, False]
    assert inj.runs[-1]["exitCode"] == 0


def _gpu_health_draining(kubeconfig: Path, ns: str, node: str, created_in: dict[str, str], stop: threading.Event) -> None:
    """gpu-health draining ``node`` as it does: every pod there is evicted while the node is
    labelled draining (a Pending one whatever its budget), and the drain ends (state repairing)
    once a pass finds no pod left; then the node's pods run to completion. ``created_in``: each
    injector pod -> the node's state when it was first seen."""
    kube = kube_client.Kube(kubeconfig)
    empty_passes = 0
    while not stop.is_set():
        state = kube.request("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"][pod_injector.STATE_LABEL]
        pods = [p for p in kube.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
                if not p["metadata"].get("deletionTimestamp")]
        for p in pods:
            path = f"/api/v1/namespaces/{ns}/pods/{p['metadata']['name']}"
            created_in.setdefault(p["metadata"]["name"], state)
            if state == "draining":
                kube.request("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                             ok404=True)
            elif not (p.get("status") or {}).get("containerStatuses"):
                p["status"] = _terminated(0, '{"record": "4,1,1,-;NVRM: Xid (PCI:0000:3a:00): 79"}')
                kube.request("PUT", f"{path}/status", p, ok404=True)
        empty_passes = empty_passes + 1 if state == "draining" and not pods else 0
        if empty_passes == 3:
            kube.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {pod_injector.STATE_LABEL: "repairing"}}},
                         content_type="application/merge-patch+json")
        stop.wait(0.05)


def test_a_retry_waits_for_gpu_healths_drain_of_the_node_to_end(
        kubeconfig: Path, render_chart: Callable[..., list[dict[str, Any]]]) -> None:
    """A drain evicts each new pod while it is Pending, and each new pod keeps the drain going:
    after one is evicted, the next is created once gpu-health has left the draining state."""
    kube = kube_client.Kube(kubeconfig)
    kube.request("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "node-drained", "labels": {pod_injector.STATE_LABEL: "draining"}}})
    inj = _injector_in(kubeconfig, render_chart, "inj-drained")
    created_in: dict[str, str] = {}
    try:
        with _beside(inj, _gpu_health_draining, kubeconfig, "inj-drained", "node-drained", created_in):
            assert "NVRM: Xid (PCI:0000:3a:00): 79" in inj.inject_fault("node-drained", "xid", code=79, gpu=2)
    finally:
        kube.request("DELETE", "/api/v1/nodes/node-drained", ok404=True)
    assert list(created_in.values()) == ["draining", "repairing"], created_in
    assert [r.get("removedBeforeItReported", "") != "" for r in inj.runs] == [True, False]
