"""Integration tests of faithful sim-kubelet pods, with the project's own demo programs
(``demo-probe``, ``podlister``): per-pod network namespaces and their clean-up, subPath mounts,
readiness probes driving Ready and Deployment availability, liveness restarts, ``kubectl logs``
and ``--previous``; and common base images (busybox, …) running their containers' own commands,
with start failures reported as StartError under each restartPolicy."""

from __future__ import annotations

import ipaddress
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from gpucatalog.clusters.sim import SimCluster, netns, procs, rootfs
from tests.clusters.sim import waiting

pytestmark = pytest.mark.integration

PROBE_IMAGE = "ghcr.io/gpu-catalog/demo-probe:0.1"


wait = waiting.wait


def _pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": name}},
            "spec": {"automountServiceAccountToken": False, "containers": containers, **spec}}


def _probe_container(*args: str, name: str = "main", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": PROBE_IMAGE, "args": list(args), **extra}


def _get(core: Any, ns: str, pod: str, port: int, path: str) -> str:
    """GET through the API server's pod proxy: API server -> egress proxy -> the pod's namespace
    ('' while nothing answers there)."""
    try:
        return str(core.connect_get_namespaced_pod_proxy_with_path(f"{pod}:{port}", ns, path.lstrip("/")))
    except client.ApiException:
        return ""


def _ready(core: Any, ns: str, name: str) -> bool:
    p = core.read_namespaced_pod(name, ns)
    return any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])


def _running(core: Any, ns: str, name: str) -> bool:
    p = core.read_namespaced_pod(name, ns)
    return p.status.phase == "Running" and all(s.started for s in p.status.container_statuses or [])


def _log(core: Any, ns: str, pod: str, **kw: Any) -> str:
    """``kubectl logs`` ('' until kwok has seen the pod's Logs object)."""
    try:
        return str(core.read_namespaced_pod_log(pod, ns, container="main", **kw))
    except client.ApiException:
        return ""


def _netns_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


# -- per-pod network namespaces --------------------------------------------------------------------
def test_each_pod_has_its_own_network_namespace_shared_by_its_containers(k8s_client: Any, sim_namespace: str) -> None:
    ns, core = sim_namespace, client.CoreV1Api(k8s_client)
    for name in ("a", "b"):  # both bind :8080, which only separate namespaces allow
        core.create_namespaced_pod(ns, _pod(name, [_probe_container("--port", "8080")]))
    core.create_namespaced_pod(ns, _pod("two", [_probe_container("--port", "8080"),
                                               _probe_container("--port", "8081", name="side")]))
    for name in ("a", "b", "two"):
        wait(f"{name} ready", lambda n=name: _ready(core, ns, n))
    who = {}
    for pod, port in (("a", 8080), ("b", 8080), ("two", 8080), ("two", 8081)):
        pid, served = wait(f"{pod}:{port} answers", lambda p=pod, q=port: _get(core, ns, p, q, "/whoami")).split()
        assert served == str(port)
        who[(pod, port)] = int(pid)
    assert len(set(who.values())) == 4
    host = _netns_of(os.getpid())
    spaces = {key: _netns_of(pid) for key, pid in who.items()}
    assert host not in spaces.values()
    assert spaces[("a", 8080)] != spaces[("b", 8080)]
    assert spaces[("two", 8080)] == spaces[("two", 8081)]  # containers of one pod share it
    ips = {p.metadata.name: p.status.pod_ip for p in core.list_namespaced_pod(ns).items}
    assert len(set(ips.values())) == 3
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network("100.64.0.0/16") for ip in ips.values())


def test_a_service_port_reaches_its_pod_in_its_namespace(k8s_client: Any, sim_namespace: str) -> None:
    ns, core = sim_namespace, client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(ns, _pod("web", [_probe_container("--port", "8080")]))
    core.create_namespaced_service(ns, {"metadata": {"name": "web"}, "spec": {
        "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}})
    wait("web ready", lambda: _ready(core, ns, "web"))
    # the API server's service proxy resolves port 80 to the endpoint's 8080 and dials the pod IP
    def via_service() -> str:
        try:
            return str(core.connect_get_namespaced_service_proxy_with_path("web:http", ns, "whoami"))
        except client.ApiException:
            return ""

    answer = wait("service answers", via_service)
    assert answer.split()[1] == "8080"


def _holders(inodes: set[int]) -> set[tuple[int, int]]:
    """(pid, network namespace inode) of every process in one of ``inodes``."""
    held = set()
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit():
                ino = os.stat(d / "ns" / "net").st_ino
                if ino in inodes:
                    held.add((int(d.name), ino))
        except OSError:
            continue
    return held


def _still_held(holders: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """Which of ``holders`` (recorded while the cluster ran) still hold their namespace. Not "is
    any process in a namespace of that inode": the kernel reuses a freed namespace's inode, and
    on a busy machine another cluster's new pod may get it."""
    return holders & _holders({ino for _, ino in holders})


def test_ctrl_c_crash_and_down_remove_every_namespace_and_relay() -> None:
    c = SimCluster(f"netns-{os.getpid()}")
    c.up(1, "cpu", timeout=180)
    try:
        core = c.core()
        core.create_namespace({"metadata": {"name": "nets"}})
        wait("default ServiceAccount", lambda: core.list_namespaced_service_account("nets").items)
        for i in range(3):
            core.create_namespaced_pod("nets", _pod(f"p{i}", [_probe_container("--port", "8080")]))
        wait("pods running", lambda: all(_running(core, "nets", f"p{i}") for i in range(3)), timeout=120)
        first = {os.stat(n.path).st_ino for n in netns.all_entries(c.layout.root)}
        assert len(first) == 3
        first_holders = _holders(first)
        assert {ino for _, ino in first_holders} == first

        # Ctrl-C (SIGINT) of the sim kubelet: it ends its pods and their namespaces before it exits
        kubelet = procs.read(c.layout.pids / "sim-kubelet.pid")
        assert kubelet is not None
        os.kill(kubelet.pid, signal.SIGINT)
        wait("kubelet gone", lambda: not kubelet.alive(), timeout=30)
        assert _still_held(first_holders) == set()
        # the supervisor restarts it; its pods come back in fresh namespaces
        wait("pods back", lambda: len(netns.all_entries(c.layout.root)) == 3, timeout=120)
        second = {os.stat(n.path).st_ino for n in netns.all_entries(c.layout.root)}
        assert len(second) == 3
        egress = procs.read(c.layout.pids / "egress-proxy.pid")
        assert egress is not None and egress.alive()

        # a crash: the supervisor is killed outright, every pod keeps running
        sup = procs.read(c.layout.pids / "supervisor.pid")
        assert sup is not None
        os.kill(sup.pid, signal.SIGKILL)
        wait("supervisor gone", lambda: not sup.alive())
        second_holders = _holders(second)
        assert {ino for _, ino in second_holders} == second
    finally:
        c.down()
    # down after the crash: no namespace, no pause process, no relay left
    assert _still_held(first_holders | second_holders) == set()
    assert not egress.alive()
    assert not c.layout.root.exists()


# -- subPath ---------------------------------------------------------------------------------------
def test_subpath_mounts_one_key_of_a_configmap_as_a_file(k8s_client: Any, sim_namespace: str) -> None:
    ns, core = sim_namespace, client.CoreV1Api(k8s_client)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cfg"}, "data": {"config.yaml": "answer: 42\n"}})
    core.create_namespaced_pod(ns, _pod("cat", [{
        "name": "main", "image": "ghcr.io/gpu-catalog/podlister:0.1", "args": ["--cat", "/etc/config/config.yaml"],
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/config/config.yaml", "subPath": "config.yaml"}],
    }], volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}], restartPolicy="Never"))
    # podlister prints the file, then fails to list (no token): what matters is the file it read
    log = wait("file printed", lambda: "answer" in (t := _log(core, ns, "cat")) and t, timeout=90)
    assert "--- /etc/config/config.yaml\nanswer: 42" in log
    assert "Is a directory" not in log


# -- probes ----------------------------------------------------------------------------------------
def test_readiness_probes_of_each_kind_drive_ready(k8s_client: Any, sim_namespace: str) -> None:
    ns, core = sim_namespace, client.CoreV1Api(k8s_client)
    timing = {"periodSeconds": 1, "failureThreshold": 1}
    core.create_namespaced_pod(ns, _pod("http", [_probe_container(
        "--ready-after", "8", readinessProbe={"httpGet": {"path": "/ready", "port": 8080}, **timing})]))
    core.create_namespaced_pod(ns, _pod("tcp", [_probe_container(
        "--listen-after", "8", ports=[{"name": "web", "containerPort": 8080}],
        readinessProbe={"tcpSocket": {"port": "web"}, **timing})]))
    core.create_namespaced_pod(ns, _pod("exec", [_probe_container(
        "--ready-after", "8", "--ready-file", "/demo-state/ready",
        volumeMounts=[{"name": "work", "mountPath": "/demo-state"}],
        readinessProbe={"exec": {"command": ["cat", "/demo-state/ready"]}, **timing})],
        volumes=[{"name": "work", "emptyDir": {}}]))
    # never ready: the probe asks a path that answers 404
    core.create_namespaced_pod(ns, _pod("never", [_probe_container(
        readinessProbe={"httpGet": {"path": "/missing", "port": 8080}, **timing})]))
    seen = _watch_readiness(core, ns, ["http", "tcp", "exec", "never"], until=["http", "tcp", "exec"])
    # each ran before its probe passed and was not Ready then; then became Ready
    assert seen == {"http": (True, True), "tcp": (True, True), "exec": (True, True), "never": (True, False)}
    time.sleep(3)
    st = core.read_namespaced_pod("never", ns).status
    assert st.phase == "Running" and st.container_statuses[0].ready is False


def _watch_readiness(core: Any, ns: str, names: list[str], until: list[str],
                     timeout: float = 90) -> dict[str, tuple[bool, bool]]:
    """Per pod: (seen Running and not Ready, seen Ready), watched until every pod of ``until``
    is Ready or ``timeout``."""
    seen = {n: (False, False) for n in names}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(seen[n][1] for n in until):
        for p in core.list_namespaced_pod(ns).items:
            name = p.metadata.name
            if name not in seen:
                continue
            ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            running = p.status.phase == "Running" and all(s.started for s in p.status.container_statuses or [])
            seen[name] = (seen[name][0] or (running and not ready), seen[name][1] or ready)
        time.sleep(0.3)
    return seen


def test_deployment_is_available_only_once_its_pods_pass_readiness(k8s_client: Any, sim_namespace: str) -> None:
    ns, apps = sim_namespace, client.AppsV1Api(k8s_client)

    def deployment(name: str, path: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {
            "replicas": 1, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {
                "automountServiceAccountToken": False,
                "containers": [_probe_container("--ready-after", "6", readinessProbe={
                    "httpGet": {"path": path, "port": 8080}, "periodSeconds": 1})]}}}}

    apps.create_namespaced_deployment(ns, deployment("good", "/ready"))
    apps.create_namespaced_deployment(ns, deployment("bad", "/missing"))
    core = client.CoreV1Api(k8s_client)
    unavailable_while_running = False
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and apps.read_namespaced_deployment("good", ns).status.available_replicas != 1:
        unavailable_while_running |= any(p.status.phase == "Running" for p in
                                         core.list_namespaced_pod(ns, label_selector="app=good").items)
        time.sleep(0.3)
    assert apps.read_namespaced_deployment("good", ns).status.available_replicas == 1
    assert unavailable_while_running  # its pod ran before it was ready, and did not count as available
    assert any(p.status.phase == "Running" for p in core.list_namespaced_pod(ns, label_selector="app=bad").items)
    assert not apps.read_namespaced_deployment("bad", ns).status.available_replicas


def test_liveness_failure_restarts_the_container(k8s_client: Any, sim_namespace: str) -> None:
    ns, core = sim_namespace, client.CoreV1Api(k8s_client)
    # the delay lets the server bind first, as a real liveness probe would need too
    core.create_namespaced_pod(ns, _pod("live", [_probe_container(livenessProbe={
        "httpGet": {"path": "/healthz", "port": 8080}, "initialDelaySeconds": 5, "periodSeconds": 1,
        "failureThreshold": 2})]))
    wait("running", lambda: _running(core, ns, "live"), timeout=90)
    first = int(wait("answers", lambda: _get(core, ns, "live", 8080, "/whoami")).split()[0])
    time.sleep(4)
    assert core.read_namespaced_pod("live", ns).status.container_statuses[0].restart_count == 0  # healthy: kept
    assert _get(core, ns, "live", 8080, "/fail")
    st = wait("restarted", lambda: (lambda s: s if s.restart_count >= 1 and s.state.running else None)(
        core.read_namespaced_pod("live", ns).status.container_statuses[0]), timeout=60)
    assert st.last_state.terminated is not None and st.last_state.terminated.exit_code in (137, 143)
    second = int(wait("answers again", lambda: _get(core, ns, "live", 8080, "/whoami")).split()[0])
    assert second != first
    time.sleep(4)  # the new instance is healthy: no further restart
    assert core.read_namespaced_pod("live", ns).status.container_statuses[0].restart_count == 1


# -- logs ------------------------------------------------------------------------------------------
def test_kubectl_logs_and_previous_of_a_restarted_container(k8s_client: Any, sim_namespace: str) -> None:
    ns, core = sim_namespace, client.CoreV1Api(k8s_client)
    core.create_namespaced_pod(ns, _pod("talk", [_probe_container("--exit-after", "4", "--message", "hello")]))

    def running_after_a_restart() -> Any:
        s = core.read_namespaced_pod("talk", ns).status.container_statuses
        return s[0] if s and s[0].restart_count >= 1 and s[0].state.running else None

    def both_logs_of_one_run() -> tuple[str, str] | None:
        """The current and previous logs read while the same run is current: the container exits
        every 4 s, and a loaded machine may take longer than that between two reads."""
        before = running_after_a_restart()
        current, previous = _log(core, ns, "talk"), _log(core, ns, "talk", previous=True)
        after = running_after_a_restart()
        same = before and after and (before.restart_count, before.container_id) == (after.restart_count, after.container_id)
        return (current, previous) if same and "demo-probe start" in current and "demo-probe start" in previous else None

    st = wait("restarted once", running_after_a_restart, timeout=90)
    assert st.last_state.terminated.exit_code == 3
    current, previous = wait("current and previous log of one run", both_logs_of_one_run, timeout=90)
    pid_now = current.split("demo-probe start pid=")[1].split()[0]
    pid_before = previous.split("demo-probe start pid=")[1].split()[0]
    assert pid_now != pid_before
    assert "hello" in previous and previous.count("demo-probe start") == 1
    stamped = core.read_namespaced_pod_log("talk", ns, container="main", timestamps=True)
    assert stamped.splitlines()[0].split(" ", 1)[0].endswith("Z")


# -- base images: the container's own command --------------------------------------------------------
needs_busybox = pytest.mark.skipif(not rootfs.available("busybox"),
                                   reason="Debian's busybox-static not installed (scripts/install-system-deps)")


def _terminated(core: Any, ns: str, name: str) -> Any:
    p = core.read_namespaced_pod(name, ns)
    st = (p.status.container_statuses or [None])[0]
    return p if p.status.phase in ("Succeeded", "Failed") and st is not None and st.state.terminated else None


@needs_busybox
def test_busybox_runs_its_own_command_with_env_workdir_and_mounts(sim_cluster: SimCluster, k8s_client: Any,
                                                                  sim_namespace: str) -> None:
    ns, core = sim_namespace, client.CoreV1Api(k8s_client)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cfg"}, "data": {"greeting": "hello"}})
    script = "echo $WHO in $(pwd); cat /etc/cfg/greeting; exit 3"
    core.create_namespaced_pod(ns, _pod("three", [{
        "name": "main", "image": "busybox:1.36", "command": ["sh", "-c"], "args": [script],
        "env": [{"name": "WHO", "value": "busybox"}], "workingDir": "/work",
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}],
        restartPolicy="Never", volumes=[{"name": "cfg", "configMap": {"name": "cfg"}}]))
    core.create_namespaced_pod(ns, _pod("sleeper", [{"name": "main", "image": "library/alpine:3.20",
                                                     "command": ["sleep", "infinity"]}]))
    core.create_namespaced_pod(ns, _pod("py", [{
        "name": "main", "image": "python:3.12-slim", "workingDir": "/tmp",
        "command": ["python", "-c", "import os; print('python in', os.getcwd()); raise SystemExit(4)"]}],
        restartPolicy="Never"))
    failed = wait("sh -c 'exit 3' to fail", lambda: _terminated(core, ns, "three"))
    term = failed.status.container_statuses[0].state.terminated
    assert (failed.status.phase, term.exit_code, term.reason) == ("Failed", 3, "Error")
    assert wait("its log", lambda: _log(core, ns, "three")) == "busybox in /work\nhello\n"
    # the evidence says it ran its own command
    line = next(x for x in sim_cluster.live_parts() if x.startswith(f"pod {ns}/three "))
    assert line.endswith("real process run by the sim kubelet (its containers' own commands: busybox:1.36 on the "
                         "sim's root file system)"), line
    py = wait("the python pod to fail", lambda: _terminated(core, ns, "py"))
    assert py.status.container_statuses[0].state.terminated.exit_code == 4
    assert wait("its log", lambda: _log(core, ns, "py")) == "python in /tmp\n"
    wait("sleep infinity to run", lambda: _running(core, ns, "sleeper"))
    sleeper = core.read_namespaced_pod("sleeper", ns)
    pid = int(sleeper.status.container_statuses[0].container_id.removeprefix("sim://"))
    assert pid > 0 and Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"infinity"]
    # it ends when the pod is deleted (SIGTERM), and not before
    assert core.read_namespaced_pod("sleeper", ns).status.phase == "Running"
    core.delete_namespaced_pod("sleeper", ns)

    def gone() -> bool:
        try:
            core.read_namespaced_pod("sleeper", ns)
        except client.ApiException as exc:
            return exc.status == 404
        return False

    wait("the sleeper to be gone", gone)
    assert not Path(f"/proc/{pid}").exists() or b"sleep" not in Path(f"/proc/{pid}/cmdline").read_bytes()


@needs_busybox
def test_a_command_that_cannot_start_is_start_error_under_each_restart_policy(k8s_client: Any, sim_namespace: str) -> None:
    ns, core = sim_namespace, client.CoreV1Api(k8s_client)
    missing = {"name": "main", "image": "debian:12", "command": ["/no/such/program"]}
    core.create_namespaced_pod(ns, _pod("never", [missing], restartPolicy="Never"))
    core.create_namespaced_pod(ns, _pod("always", [missing], restartPolicy="Always"))
    failed = wait("the pod to fail", lambda: _terminated(core, ns, "never"))
    term = failed.status.container_statuses[0].state.terminated
    assert (failed.status.phase, term.reason, term.exit_code) == ("Failed", "StartError", 128)
    assert "/no/such/program" in term.message

    def restarted() -> Any:
        st = (core.read_namespaced_pod("always", ns).status.container_statuses or [None])[0]
        return st if st is not None and st.restart_count >= 1 and st.last_state.terminated else None

    st = wait("a restart after StartError", restarted)
    assert st.last_state.terminated.reason == "StartError"
    assert core.read_namespaced_pod("always", ns).status.phase == "Running"  # as a kubelet reports a crash loop


@needs_busybox
def test_deletion_runs_pre_stop_then_sigterm_then_sigkill_after_the_grace_period(
        sim_cluster: SimCluster, k8s_client: Any, sim_namespace: str) -> None:
    ns, core = sim_namespace, client.CoreV1Api(k8s_client)
    node, out = "h100-node-0003", f"/var/log/grace-{sim_namespace}"
    graceful = ('trap "echo term >> /out/log; exit 7" TERM; echo started >> /out/log; '
                "while :; do sleep 1 & wait $!; done")
    stubborn = 'trap "" TERM; echo stubborn >> /out/log; while :; do sleep 1; done'
    mount = [{"name": "out", "mountPath": "/out"}]
    core.create_namespaced_pod(ns, _pod("grace", [
        {"name": "main", "image": "busybox", "command": ["sh", "-c", graceful], "volumeMounts": mount,
         "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "echo prestop >> /out/log"]}}}},
        {"name": "stubborn", "image": "busybox", "command": ["sh", "-c", stubborn], "volumeMounts": mount}],
        nodeName=node, terminationGracePeriodSeconds=3,
        volumes=[{"name": "out", "hostPath": {"path": out, "type": "DirectoryOrCreate"}}]))
    log = sim_cluster.node_dir(node) / out.lstrip("/") / "log"
    wait("both containers to start", lambda: log.exists() and {"started", "stubborn"} <= set(log.read_text().split()))
    seen: list[Any] = []
    w = watch.Watch()
    core.delete_namespaced_pod("grace", ns)
    for ev in w.stream(core.list_namespaced_pod, ns, field_selector="metadata.name=grace", timeout_seconds=60):
        seen.append(ev["object"])
        if ev["type"] == "DELETED":
            w.stop()
    # the terminal status was written before the pod object went
    states = {s.name: s.state.terminated for s in seen[-1].status.container_statuses}
    assert states["main"] is not None and states["main"].exit_code == 7  # its TERM trap ran
    assert states["stubborn"] is not None and states["stubborn"].exit_code == 137  # SIGKILLed after the grace period
    assert [x for x in log.read_text().split() if x in ("prestop", "term")] == ["prestop", "term"]
