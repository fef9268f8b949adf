"""A sim cluster started with an image-map overlay runs the mapped executables (the project's own
podlister behind a launcher) for pods of those images, kwok leaves them alone, and the evidence
lines list each mapped image with its sha256 and reported version, live only when a pod really
ran it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpucatalog.clusters.sim import SimCluster
from gpucatalog.core import kubeapi
from tests.clusters.sim.test_imagemap import launcher, overlay

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
IMAGE = "ghcr.io/example/byo-lister"
SWAPPED = "ghcr.io/example/swapped"  # its file is replaced after the cluster started


def wait(what: str, probe: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = probe()
        if v:
            return v
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def byo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SimCluster, Any, Path]]:
    d = tmp_path_factory.mktemp("byo")
    exe = launcher(d)
    f = overlay(d, f"  - image: {IMAGE}\n    executable: {exe}\n    entrypoint: /workspace/app\n"
                   "    versionArgs: [--version]\n"
                   f"  - image: ghcr.io/example/never-used\n    executable: {exe}\n    entrypoint: /app\n"
                   f"  - image: {SWAPPED}\n    executable: {launcher(d, name='swapped')}\n    entrypoint: /app\n")
    cluster = SimCluster(f"byo-{os.getpid()}")
    cluster.up(1, "h100-80gb-x8", heartbeat_s=3.0, image_map=f)
    try:
        core = client.CoreV1Api(kubeapi.client_for(cluster.kubeconfig()))
        core.create_namespace({"metadata": {"name": "byo"}})
        yield cluster, core, exe
    finally:
        cluster.down()


def _pod(core: Any, name: str, tag: str) -> None:
    core.create_namespaced_pod("byo", {"metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "automountServiceAccountToken": False, "nodeName": "h100-node-0000",
        "containers": [{"name": "main", "image": f"{IMAGE}:{tag}", "args": ["--version"]}]}})


def test_mapped_executable_runs_and_is_recorded_as_live(byo: tuple[SimCluster, Any, Path]) -> None:
    cluster, core, exe = byo
    wait("the default ServiceAccount", lambda: core.list_namespaced_service_account("byo").items)
    _pod(core, "lister", "0.1.0")
    # Succeeded comes from the real process exiting 0 (kwok would keep a pod Running).
    pod = wait("the mapped pod to succeed", lambda: (p := core.read_namespaced_pod("lister", "byo")).status.phase
               == "Succeeded" and p)
    assert pod.status.container_statuses[0].container_id.startswith("sim://")
    log = wait("its log", lambda: _log(core, "lister"))
    assert "podlister 0.1.0" in log

    (lister, never, _swapped) = sorted(cluster.mapped_images(), key=lambda m: m["image"])
    assert lister["image"] == IMAGE and lister["executable"] == str(exe.resolve())
    assert lister["sha256"].startswith("sha256:") and lister["version"] == "0.1.0"
    assert lister["live"] is True and lister["ran"] == ["byo/lister"] and lister["tags"] == ["0.1.0"]
    assert lister["version_matches"] is True and lister["userSupplied"] is True and lister["refused"] == []
    assert never["image"] == "ghcr.io/example/never-used" and never["live"] is False and never["ran"] == []
    live = cluster.live_parts()
    assert any(line.startswith(f"image {IMAGE} -> {exe.resolve()} ({lister['sha256']}, reports 0.1.0, user-supplied): ran in byo/lister")
               for line in live)
    assert any(f"pod byo/lister ({IMAGE}:0.1.0): real process" in line for line in live)
    assert any("ghcr.io/example/never-used" in line and "mapped, but no pod ran it" in line
               for line in cluster.simulated_parts())

    # A pod of another tag ran the same executable: its reported version no longer matches.
    _pod(core, "other", "9.9.9")
    wait("the second pod to succeed", lambda: core.read_namespaced_pod("other", "byo").status.phase == "Succeeded")
    (lister, _never, _swapped) = sorted(cluster.mapped_images(), key=lambda m: m["image"])
    assert lister["tags"] == ["0.1.0", "9.9.9"] and lister["version_matches"] is False


def test_an_executable_replaced_after_load_never_runs(byo: tuple[SimCluster, Any, Path]) -> None:
    cluster, core, exe = byo
    swapped = exe.parent / "swapped"
    # a wrapper that prints what the evidence expects, written after the cluster hashed the file
    swapped.write_text("#!/bin/sh\necho podlister 0.1.0\n")
    wait("the default ServiceAccount", lambda: core.list_namespaced_service_account("byo").items)
    core.create_namespaced_pod("byo", {"metadata": {"name": "swapped"}, "spec": {
        "restartPolicy": "Never", "automountServiceAccountToken": False, "nodeName": "h100-node-0000",
        "containers": [{"name": "main", "image": f"{SWAPPED}:0.1.0"}]}})

    def refused() -> Any:
        st = core.read_namespaced_pod("swapped", "byo").status
        waiting = st.container_statuses[0].state.waiting if st.container_statuses else None
        return waiting if waiting is not None and waiting.reason == "StartError" else None

    waiting = wait("the start to be refused", refused)
    assert "changed after the image map was loaded" in waiting.message and str(swapped.resolve()) in waiting.message
    m = next(m for m in cluster.mapped_images() if m["image"] == SWAPPED)
    assert m["live"] is False and m["ran"] == [] and len(m["refused"]) == 1
    assert any(SWAPPED in line and "a start refused" in line for line in cluster.simulated_parts())


def _log(core: Any, pod: str) -> str:
    try:
        return str(core.read_namespaced_pod_log(pod, "byo", container="main"))
    except client.ApiException:
        return ""
