"""Pods of Kubernetes' e2e image ``agnhost`` run the pinned agnhost build for real (built on first
use from the control plane's module): ``netexec`` serves HTTP in the pod's network, ``/exit`` ends
the container with the code asked (and it restarts), the image's default command (``pause``) runs
until the pod is deleted, and ``kubectl exec`` reaches /agnhost inside the pod.

The test owns its cluster: which base images the sim runs is fixed when a cluster starts (kwok is
told then which pods to leave alone), and agnhost must be built before that."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpucatalog.clusters.sim import SimCluster, rootfs
from gpucatalog.core import executor
from gpucatalog.toolchain import build
from tests.clusters.sim import waiting

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not rootfs.available("busybox"), reason="Debian's busybox-static not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root"),
]
IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.63"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[SimCluster, Any]]:
    build.ensure("agnhost", print)
    assert rootfs.available("agnhost")
    sim = SimCluster(f"agnhost-{os.getpid()}")
    sim.up(1, "h100-80gb-x8", heartbeat_s=3.0)
    try:
        core = client.CoreV1Api(sim.api_client())
        core.create_namespace({"metadata": {"name": "e2e"}})
        waiting.wait("the default ServiceAccount", lambda: core.list_namespaced_service_account(
            "e2e", field_selector="metadata.name=default").items)
        yield sim, core
    finally:
        sim.down()


def _pod(name: str, **container: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"automountServiceAccountToken": False,
                                                 "terminationGracePeriodSeconds": 1,
                                                 "containers": [{"name": "agnhost", "image": IMAGE, **container}]}}


def _status(core: Any, name: str) -> Any:
    return (core.read_namespaced_pod(name, "e2e").status.container_statuses or [None])[0]


def _get(core: Any, pod: str, path: str) -> str:
    try:
        return str(core.connect_get_namespaced_pod_proxy_with_path(f"{pod}:8080", "e2e", path))
    except client.ApiException:
        return ""


def _exec(sim: SimCluster, pod: str, *argv: str) -> Any:
    return executor.run([build.ensure("kubectl"), "--kubeconfig", sim.kubeconfig(), "exec", "-n", "e2e", pod, "--",
                         *argv], check=False, timeout=60)


def test_netexec_serves_and_exits_with_the_code_asked(cluster: tuple[SimCluster, Any]) -> None:
    sim, core = cluster
    core.create_namespaced_pod("e2e", _pod("netexec", args=["netexec", "--http-port=8080"]))
    # through the API server's pod proxy into the pod's network: netexec's root page is the time
    assert waiting.wait("netexec to answer", lambda: _get(core, "netexec", "")).startswith("NOW: ")
    pid = int(_status(core, "netexec").container_id.removeprefix("sim://"))
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"/agnhost", b"netexec"]
    line = next(x for x in sim.live_parts() if x.startswith("pod e2e/netexec "))
    assert "real process run by the sim kubelet" in line and "agnhost" in line, line
    # kubectl exec into it, as upstream e2e specs do: the image's program is at /agnhost there,
    # and netexec answers on the pod's own loopback
    echo = _exec(sim, "netexec", "wget", "-qO-", "http://127.0.0.1:8080/echo?msg=from-inside")
    assert (echo.returncode, echo.stdout) == (0, "from-inside"), echo.stderr
    assert _exec(sim, "netexec", "ls", "/agnhost").stdout == "/agnhost\n"
    # curl, which upstream e2e specs exec in agnhost pods (Kueue's ask netexec to exit through it)
    ready = _exec(sim, "netexec", "/bin/sh", "-c", 'curl -s "http://127.0.0.1:8080/echo?msg=by-curl"')
    assert (ready.returncode, ready.stdout) == (0, "by-curl"), ready.stderr
    _exec(sim, "netexec", "wget", "-qO-", "http://127.0.0.1:8080/exit?code=3")  # no answer: the server exits
    st = waiting.wait("a restart after exit 3", lambda: (s := _status(core, "netexec")) and s.restart_count >= 1 and s)
    assert st.last_state.terminated.exit_code == 3
    assert waiting.wait("netexec to answer again", lambda: _get(core, "netexec", "")).startswith("NOW: ")


def test_the_images_default_command_pauses_until_deleted(cluster: tuple[SimCluster, Any]) -> None:
    _sim, core = cluster
    core.create_namespaced_pod("e2e", _pod("paused"))
    waiting.wait("pause to run", lambda: (s := _status(core, "paused")) and s.state.running)
    pid = int(_status(core, "paused").container_id.removeprefix("sim://"))
    # the sim's launcher becomes the container's program once the pod's root is in place
    waiting.wait("/agnhost pause to run", lambda: Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2]
                 == [b"/agnhost", b"pause"])
    core.delete_namespaced_pod("paused", "e2e")
    waiting.wait("the pod to go", lambda: not core.list_namespaced_pod(
        "e2e", field_selector="metadata.name=paused").items)
    assert not Path(f"/proc/{pid}").exists() or b"pause" not in Path(f"/proc/{pid}/cmdline").read_bytes()
