"""``kubectl exec`` into sim-kubelet pods, through the API server to the nodes' kubelet API
(:mod:`gpucatalog.clusters.sim.kubeletapi`): the command runs inside the container (its root, its
environment, its network namespace), stdin, stdout and stderr stream, the exit code comes back;
a pod kwok only simulates and a container that is not there are refused; ``kubectl logs`` still
goes through to kwok. Needs root and Debian's busybox-static (the container's root)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from gpucatalog.clusters.sim import SimCluster, rootfs
from gpucatalog.core import executor
from gpucatalog.toolchain import build
from tests.clusters.sim import waiting

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not rootfs.available("busybox"), reason="Debian's busybox-static not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root"),
]


def _kubectl(cluster: SimCluster, *args: str, stdin: str | None = None) -> Any:
    return executor.run([build.ensure("kubectl"), "--kubeconfig", cluster.kubeconfig(), *args], input=stdin,
                        check=False, timeout=60)


def _running(core: Any, ns: str, name: str) -> bool:
    p = core.read_namespaced_pod(name, ns)
    return p.status.phase == "Running" and all(s.started for s in p.status.container_statuses or [])


@pytest.fixture()
def sleeper(sim_cluster: SimCluster, k8s_client: Any, sim_namespace: str) -> str:
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(sim_namespace, {"metadata": {"name": "sleeper"}, "spec": {
        "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "infinity"],
                        "env": [{"name": "WHO", "value": "the container"}], "workingDir": "/work"}]}})
    waiting.wait("the sleeper to run", lambda: _running(core, sim_namespace, "sleeper"))
    return sim_namespace


def test_a_container_is_reported_started_only_once_its_program_runs(k8s_client: Any, sim_namespace: str) -> None:
    """The first status that says "started" (what the sleeper fixture, and upstream e2e specs, wait
    for before they exec) already finds the container's own program behind its pid: its
    environment, not that of the launcher still setting up the container's root."""
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(sim_namespace, {"metadata": {"name": "first-look"}, "spec": {
        "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "infinity"],
                        "env": [{"name": "WHO", "value": "the container"}]}]}})
    seen: list[str] = []
    for event in watch.Watch().stream(core.list_namespaced_pod, sim_namespace, timeout_seconds=60,
                                      field_selector="metadata.name=first-look"):
        statuses = event["object"].status.container_statuses or []
        seen.append(str([(s.started, s.container_id) for s in statuses]))
        if statuses and statuses[0].started:
            pid = int(statuses[0].container_id.removeprefix("sim://"))
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert b"WHO=the container" in environ, environ
            return
    raise AssertionError(f"never reported started: {seen}")


def test_exec_runs_in_the_container_and_returns_its_output_and_exit_code(sim_cluster: SimCluster, sleeper: str) -> None:
    ns = sleeper
    mark = f"/tmp/mark-{ns}"  # named for the test, so what a broken run left on the host cannot fail it
    script = f"echo $WHO in $(pwd); echo to-stderr >&2; echo written > {mark}; exit 3"
    proc = _kubectl(sim_cluster, "exec", "-n", ns, "sleeper", "--", "sh", "-c", script)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "the container in /work\n"
    assert "to-stderr" in proc.stderr and "command terminated with exit code 3" in proc.stderr
    # a second exec sees what the first wrote, in the container's own root and not on the host
    again = _kubectl(sim_cluster, "exec", "-n", ns, "sleeper", "-c", "main", "--", "cat", mark)
    assert (again.returncode, again.stdout) == (0, "written\n"), again.stderr
    assert not Path(mark).exists()
    # the container's network namespace: the pod's own IP is on its loopback there
    pod_ip = client.CoreV1Api(sim_cluster.api_client()).read_namespaced_pod("sleeper", ns).status.pod_ip
    addrs = _kubectl(sim_cluster, "exec", "-n", ns, "sleeper", "--", "ip", "-4", "addr", "show", "lo")
    assert f"inet {pod_ip}/" in addrs.stdout, addrs.stdout + addrs.stderr


def test_stdin_streams_into_the_command(sim_cluster: SimCluster, sleeper: str) -> None:
    text = "".join(f"line {i}\n" for i in range(2000))  # more than one frame's worth
    proc = _kubectl(sim_cluster, "exec", "-i", "-n", sleeper, "sleeper", "--", "sh", "-c", "cat; echo done",
                    stdin=text)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == text + "done\n"


def test_a_missing_command_container_or_sim_pod_is_refused(sim_cluster: SimCluster, k8s_client: Any,
                                                           sleeper: str) -> None:
    ns = sleeper
    missing = _kubectl(sim_cluster, "exec", "-n", ns, "sleeper", "--", "/no/such/program")
    assert missing.returncode != 0 and "/no/such/program" in missing.stderr, missing.stderr
    other = _kubectl(sim_cluster, "exec", "-n", ns, "sleeper", "-c", "sidecar", "--", "true")
    assert other.returncode != 0 and "sidecar" in other.stderr, other.stderr
    # a pod kwok only simulates (pause) has no process: kwok's own answer, an error
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(ns, {"metadata": {"name": "pause"}, "spec": {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}})
    waiting.wait("the pause pod to run", lambda: core.read_namespaced_pod("pause", ns).status.phase == "Running")
    kwoks = _kubectl(sim_cluster, "exec", "-n", ns, "pause", "--", "true")
    assert kwoks.returncode != 0, kwoks.stdout
