"""What kind needs to run KAI from a user's binaries: the images an operator's resource names,
images built from an image-map overlay's binaries under the bundle's names, which of them ran
(from the pods' container statuses), and the SIMULATED GPU agent that writes each KAI reservation
pod's GPU. Against a real cluster: by hand (docs/kind.md)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpucatalog.clusters.kind import gpuagent, images, usermaps
from gpucatalog.clusters.sim import imagemap, nodeagent
from gpucatalog.core import errors

KAI = "ghcr.io/kai-scheduler/kai-scheduler"
CONFIG = {"apiVersion": "kai.scheduler/v1", "kind": "Config", "spec": {
    "scheduler": {"service": {"image": {"repository": KAI, "name": "scheduler", "tag": "v0.17.0"}}},
    "binder": {"service": {"image": {"repository": KAI, "name": "binder", "tag": "v0.17.0"}},
               "resourceReservation": {"image": {"repository": KAI, "name": "resourcereservation", "tag": "v0.17.0"}}}}}
OPERATOR = {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {"spec": {
    "containers": [{"name": "operator", "image": f"{KAI}/operator:v0.17.0"}]}}}}


def _binary(tmp_path: Path, image: str, version: str = "v0.17.0") -> imagemap.MappedBinary:
    exe = tmp_path / image.rsplit("/", 1)[-1]
    exe.write_text(f"#!/bin/sh\necho {version}\n")
    exe.chmod(0o755)
    overlay = tmp_path / f"{exe.name}.yaml"
    overlay.write_text(json.dumps({"apiVersion": "gpu-catalog.dev/v1alpha1", "kind": "SimImageMapOverlay", "images": [
        {"image": image, "executable": str(exe), "entrypoint": "/workspace/app", "versionArgs": ["--version"]}]}))
    (b,) = imagemap.load(overlay)
    return b


def test_images_named_by_an_operators_resource_are_found_with_the_pods_images() -> None:
    assert images.images_of([OPERATOR, CONFIG]) == [
        f"{KAI}/operator:v0.17.0", f"{KAI}/scheduler:v0.17.0", f"{KAI}/binder:v0.17.0",
        f"{KAI}/resourcereservation:v0.17.0"]
    # KAI's reservation image is a SIMULATED stand-in, built here; the GPU agent's image too
    assert images.buildable(f"{KAI}/resourcereservation:v0.17.0") and images.buildable(images.gpu_agent_ref())
    assert not images.buildable(f"{KAI}/scheduler:v0.17.0")  # only a user's binary serves it


def test_an_overlay_serves_every_tag_of_its_repository_and_a_tagged_entry_only_its_tag(tmp_path: Path) -> None:
    sched = _binary(tmp_path, f"{KAI}/scheduler")
    binder = _binary(tmp_path, f"{KAI}/binder:v0.17.0")
    refs = [f"{KAI}/scheduler:v0.17.0", f"{KAI}/scheduler:v0.16.8", f"{KAI}/binder:v0.17.0", f"{KAI}/binder:v0.16.8",
            f"{KAI}/operator:v0.17.0"]
    assert images.mapped_refs(refs, [sched, binder]) == {
        f"{KAI}/scheduler:v0.17.0": sched, f"{KAI}/scheduler:v0.16.8": sched, f"{KAI}/binder:v0.17.0": binder}


def test_a_users_binary_becomes_the_images_entrypoint_and_a_changed_file_is_refused(tmp_path: Path) -> None:
    b = _binary(tmp_path, f"{KAI}/scheduler")
    work = tmp_path / "work"
    work.mkdir()
    image, src = images._user_binary(f"{KAI}/scheduler:v0.17.0", b, work, lambda _m: None)
    assert image.entrypoint == ("/workspace/app",) and image.ref == f"{KAI}/scheduler:v0.17.0"
    assert image.user == "65532:65532"  # pods asking for runAsNonRoot (KAI's) need the image to name a user
    assert src.startswith(images.USER_SUPPLIED) and b.sha256 in src and b.executable in src
    with tarfile.open(image.layers[-1]) as tar:
        member = tar.getmember("workspace/app")
        assert member.mode & 0o111 and tar.extractfile(member).read() == Path(b.executable).read_bytes()  # type: ignore[union-attr]
    Path(b.executable).write_text("#!/bin/sh\necho replaced\n")
    with pytest.raises(errors.InputError, match="changed after the image map was loaded"):
        images._user_binary(f"{KAI}/scheduler:v0.17.0", b, work, lambda _m: None)


def _pod(ns: str, name: str, image: str, state: dict[str, Any] | None, restarts: int = 0) -> Any:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(namespace=ns, name=name),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image=image)]),
        status=client.V1PodStatus(container_statuses=[client.V1ContainerStatus(
            name="c", image=image, image_id="", ready=False, restart_count=restarts,
            state=client.V1ContainerState(**(state or {})))]))


def test_a_binary_is_live_only_where_a_container_of_its_image_started(tmp_path: Path) -> None:
    sched, binder = _binary(tmp_path, f"{KAI}/scheduler"), _binary(tmp_path, f"{KAI}/binder", version="v0.16.8")
    built = [images.Built(f"{KAI}/scheduler:v0.17.0", "sha256:" + "1" * 64, f"{images.USER_SUPPLIED} executable …"),
             images.Built(f"{KAI}/binder:v0.17.0", "sha256:" + "2" * 64, f"{images.USER_SUPPLIED} executable …")]
    started = {"running": client.V1ContainerStateRunning()}
    waiting = {"waiting": client.V1ContainerStateWaiting(reason="ErrImageNeverPull")}
    pods = [_pod("kai-scheduler", "scheduler-1", f"{KAI}/scheduler:v0.17.0", started),
            _pod("kai-scheduler", "binder-1", f"{KAI}/binder:v0.17.0", waiting)]
    facts = {m["image"]: m for m in usermaps.mapped_images([sched, binder], built, pods)}
    assert facts[sched.image]["live"] and facts[sched.image]["ran"] == ["kai-scheduler/scheduler-1"]
    assert facts[sched.image]["tags"] == ["v0.17.0"] and facts[sched.image]["version_matches"]
    assert not facts[binder.image]["live"] and facts[binder.image]["version_matches"]  # never ran: nothing to match
    live, not_run = usermaps.lines(list(facts.values()))
    assert len(live) == 1 and "user-supplied" in live[0] and "ran in kai-scheduler/scheduler-1" in live[0]
    assert not_run == [not_run[0]] and "no pod ran it" in not_run[0]
    # a binary reporting v0.16.8 that ran as tag v0.17.0 is named (certification fails on it)
    pods[1] = _pod("kai-scheduler", "binder-1", f"{KAI}/binder:v0.17.0", None, restarts=2)
    facts = {m["image"]: m for m in usermaps.mapped_images([sched, binder], built, pods)}
    assert facts[binder.image]["live"] and not facts[binder.image]["version_matches"]


class RecordingCore:
    def __init__(self, pods: list[Any]) -> None:
        self.pods = pods
        self.selectors: list[str] = []
        self.patched: list[tuple[str, str, str]] = []

    def list_namespaced_pod(self, namespace: str, field_selector: str = "") -> Any:
        assert namespace == nodeagent.RESERVATION_NAMESPACE
        self.selectors.append(field_selector)
        node = field_selector.removeprefix("spec.nodeName=")
        return client.V1PodList(items=[p for p in self.pods if p.spec.node_name == node])

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.patched.append((namespace, name, body["metadata"]["annotations"][nodeagent.RESERVATION_ANNOTATION]))


def _reservation(name: str, node: str, gpu: str | None = None) -> Any:
    ann = {nodeagent.RESERVATION_ANNOTATION: gpu} if gpu else None
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name, annotations=ann),
                        spec=client.V1PodSpec(node_name=node, containers=[]))


def test_the_gpu_agent_gives_each_reservation_pod_on_its_node_a_gpu_no_other_holds(tmp_path: Path) -> None:
    (tmp_path / "sim").mkdir()
    (tmp_path / "sim" / "hw.json").write_text(json.dumps({"gpus": [
        {"uuid": "GPU-a", "fallen_off_bus": False}, {"uuid": "GPU-b", "fallen_off_bus": True},
        {"uuid": "GPU-c", "fallen_off_bus": False}, {"uuid": "GPU-d", "fallen_off_bus": False}]}))
    core = RecordingCore([_reservation("held", "w1", "GPU-a"), _reservation("new-1", "w1"), _reservation("new-2", "w1"),
                          _reservation("elsewhere", "w2")])
    assert gpuagent.once(core, "w1", tmp_path) == 2
    assert core.selectors == ["spec.nodeName=w1"]  # only its own node
    # GPU-a is held and GPU-b fell off the bus: the next free ones, distinct
    assert core.patched == [(nodeagent.RESERVATION_NAMESPACE, "new-1", "GPU-c"),
                            (nodeagent.RESERVATION_NAMESPACE, "new-2", "GPU-d")]
    assert gpuagent.node_uuids(tmp_path / "missing") == []


def test_the_gpu_agent_reads_its_node_folder_read_only_and_may_only_list_and_patch_pods() -> None:
    docs = {d["kind"]: d for d in gpuagent.manifests("gpu-catalog.local/sim-gpu-agent:0.1.0")}
    assert docs["ClusterRole"]["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "patch"]}]
    pod = docs["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    (mount,) = pod["containers"][0]["volumeMounts"]
    assert mount["readOnly"] and pod["volumes"][0]["hostPath"]["path"] == gpuagent.NODE_ROOT
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
