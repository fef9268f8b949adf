"""Integration tests of the sim cluster: real control plane, kwok GPU nodes, the sim kubelet."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from gpucatalog.clusters.sim import SimCluster, ports, procs
from gpucatalog.core import errors
from tests.clusters.sim import waiting

pytestmark = pytest.mark.integration


wait = waiting.wait


def test_nodes_ready_with_gpus(sim_cluster: SimCluster, k8s_client: Any) -> None:
    items = client.CoreV1Api(k8s_client).list_node().items
    assert len(items) == 8
    for n in items:
        assert any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)
        assert n.status.capacity["nvidia.com/gpu"] == "8"
        assert n.status.allocatable["nvidia.com/gpu"] == "8"
        assert n.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert n.metadata.labels["nvidia.com/gpu.count"] == "8"
    version = client.VersionApi(k8s_client).get_code()
    assert version.git_version == "v1.36.3" and version.major == "1"


def test_gpu_job_with_a_scripted_end_runs_to_succeeded_via_default_scheduler(k8s_client: Any, sim_namespace: str) -> None:
    # an image the sim cannot run: kwok keeps its pods running until the annotation ends them
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gpu4"},
        "spec": {"completions": 4, "parallelism": 4, "backoffLimit": 0, "template": {
            "metadata": {"annotations": {"sim.gpu-catalog.dev/run-for": "1s"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.0-base",
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
    }
    client.BatchV1Api(k8s_client).create_namespaced_job(sim_namespace, job)
    done = wait("job complete", lambda: (client.BatchV1Api(k8s_client)
                                         .read_namespaced_job_status("gpu4", sim_namespace).status.succeeded or 0) >= 4)
    assert done
    pods = client.CoreV1Api(k8s_client).list_namespaced_pod(sim_namespace).items
    assert len(pods) == 4
    for p in pods:
        assert p.status.phase == "Succeeded"
        assert p.spec.node_name and p.spec.scheduler_name == "default-scheduler"


def test_bare_pod_finishes_on_request(k8s_client: Any, sim_namespace: str) -> None:
    core = client.CoreV1Api(k8s_client)
    pod = {"metadata": {"name": "finisher", "annotations": {"sim.gpu-catalog.dev/complete": "true",
                                                           "sim.gpu-catalog.dev/exit-code": "3"}},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.0-base"}]}}
    core.create_namespaced_pod(sim_namespace, pod)
    p = wait("pod failed", lambda: (lambda x: x if x.status.phase == "Failed" else None)(
        core.read_namespaced_pod("finisher", sim_namespace)))
    assert p.status.container_statuses[0].state.terminated.exit_code == 3
    core.create_namespaced_pod(sim_namespace, {"metadata": {"name": "sleeper"}, "spec": {
        "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.0-base"}]}})
    wait("pod running", lambda: core.read_namespaced_pod("sleeper", sim_namespace).status.phase == "Running")
    time.sleep(1.5)
    assert core.read_namespaced_pod("sleeper", sim_namespace).status.phase == "Running"  # not asked: keeps running


def test_custom_node_condition_survives_kwok_heartbeat(k8s_client: Any) -> None:
    core = client.CoreV1Api(k8s_client)
    name = "h100-node-0007"

    def ready_beat() -> Any:
        n = core.read_node(name)
        return next(c.last_heartbeat_time for c in n.status.conditions if c.type == "Ready")

    before = ready_beat()
    core.patch_node_status(name, {"status": {"conditions": [
        {"type": "GPUHealthy", "status": "False", "reason": "XID79", "message": "GPU 2 fell off the bus"}]}})
    wait("a kwok heartbeat", lambda: ready_beat() != before, timeout=30)
    conds = {c.type: c for c in core.read_node(name).status.conditions}
    assert conds["GPUHealthy"].status == "False" and conds["GPUHealthy"].reason == "XID79"
    assert conds["Ready"].status == "True"
    core.patch_node_status(name, {"status": {"conditions": [
        {"type": "GPUHealthy", "status": "True", "reason": "Healthy", "message": ""}]}})


def _lister_deployment(ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "lister"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "lister"}},
                 "template": {"metadata": {"labels": {"app": "lister"}}, "spec": {
                     "serviceAccountName": "lister",
                     "containers": [{"name": "main", "image": "ghcr.io/gpu-catalog/podlister:0.1",
                                     "args": ["--interval", "0.5"]}]}}},
    }


def _pod_log(cluster: SimCluster, pod: Any) -> str:
    path = cluster.node_dir(pod.spec.node_name) / "pods" / f"{pod.metadata.namespace}_{pod.metadata.name}" / "main.log"
    return path.read_text() if path.exists() else ""


def test_sim_kubelet_runs_pod_with_serviceaccount_rbac(sim_cluster: SimCluster, k8s_client: Any,
                                                        sim_namespace: str) -> None:
    core = client.CoreV1Api(k8s_client)
    rbac = client.RbacAuthorizationV1Api(k8s_client)
    ns = sim_namespace
    core.create_namespaced_service_account(ns, {"metadata": {"name": "lister"}})
    client.AppsV1Api(k8s_client).create_namespaced_deployment(ns, _lister_deployment(ns))

    def lister_pod() -> Any:
        pods = core.list_namespaced_pod(ns, label_selector="app=lister").items
        return pods[0] if pods and pods[0].status.pod_ip else None

    pod = wait("lister pod started", lister_pod)
    assert pod.status.pod_ip.startswith("100.64.")  # Endpoints-valid; the process sits on 127.<slot>.x.y
    # without a Role: the real API server refuses, the process exits 3, the kubelet restarts it
    wait("forbidden in log", lambda: "forbidden" in _pod_log(sim_cluster, lister_pod()))
    crashed = wait("restart recorded", lambda: (lambda p: p if p.status.container_statuses[0].restart_count >= 1
                                                else None)(core.read_namespaced_pod(pod.metadata.name, ns)))
    last = crashed.status.container_statuses[0].last_state.terminated
    assert last is not None and last.exit_code == 3
    rbac.create_namespaced_role(ns, {"metadata": {"name": "podreader"},
                                     "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "podreader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "podreader"},
        "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": ns}]})
    wait("pods listed", lambda: f"listed 1 pods in {ns}" in _pod_log(sim_cluster, lister_pod()), timeout=90)
    running = wait("ready", lambda: (lambda p: p if p.status.phase == "Running" and p.status.container_statuses[0].ready
                                     else None)(core.read_namespaced_pod(pod.metadata.name, ns)))
    assert running.status.container_statuses[0].state.running is not None
    # deleting the Deployment ends the host process
    pid_file = sim_cluster.node_dir(pod.spec.node_name) / "pods" / f"{ns}_{pod.metadata.name}" / "main.pid"
    rec = procs.read(pid_file)
    assert rec is not None and rec.alive()
    client.AppsV1Api(k8s_client).delete_namespaced_deployment("lister", ns)
    wait("pod gone", lambda: not core.list_namespaced_pod(ns, label_selector="app=lister").items)
    assert not rec.alive()


def test_kill_api_server_status_reports_it_and_down_cleans_up(sim_cluster: SimCluster) -> None:
    # a second cluster next to the session one: two named clusters at once
    c = SimCluster(f"kill-{os.getpid()}")
    c.up(1, "cpu", restart="never", timeout=120)
    try:
        assert sim_cluster.running() and c.running()
        with pytest.raises(errors.ConflictError, match="already running"):
            c.up(1, "cpu")
        api = procs.read(c.layout.pids / "kube-apiserver.pid")
        assert api is not None
        os.kill(api.pid, signal.SIGKILL)
        st = wait("status shows the dead API server",
                  lambda: (lambda s: s if not s["components"]["kube-apiserver"]["alive"] else None)(c.status()))
        assert st["healthy"] is False
        recs = procs.read_all(c.layout.pids)
        assert len(recs) >= 6
    finally:
        c.down()
    assert not any(r.alive() for r in recs)
    assert not c.layout.root.exists()
    with pytest.raises(errors.NotFoundError):
        c.down()


def test_port_in_use_is_rejected_without_leftovers() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert ports.in_use(port)
        with pytest.raises(errors.ConflictError, match="already in use"):
            SimCluster(f"port-{os.getpid()}").up(1, "cpu", api_port=port)
    assert not SimCluster(f"port-{os.getpid()}").layout.root.exists()


# kwok's stand-in for the Ctrl-C test: serves /healthz where the supervisor probes kwok, and
# manages no node, so no node ever becomes Ready.
_IDLE_KWOK = """#!{python}
import http.server, sys
addr = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--server-address="))
host, port = addr.rsplit(":", 1)

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass

http.server.HTTPServer((host, int(port)), Health).serve_forever()
"""


def _cache_with_idle_kwok(root: Path) -> Path:
    """A toolchain cache holding the real control plane (links to the built binaries, with their
    stamps) and the idle kwok above in kwok's place."""
    import hashlib
    import shutil

    from gpucatalog.clusters.sim.cluster import TOOLS
    from gpucatalog.toolchain import build

    real_root = build.cache_root()
    for tool in TOOLS:
        real = build.cached(tool)
        assert real is not None, f"{tool} is not built"
        dest = root / real.relative_to(real_root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if tool == "kwok":
            dest.write_text(_IDLE_KWOK.format(python=sys.executable))
            dest.chmod(0o755)
            dest.with_name("kwok.sha256").write_text(hashlib.sha256(dest.read_bytes()).hexdigest() + "\n")
        else:
            dest.symlink_to(real)
            shutil.copy(real.with_name(tool + ".sha256"), dest.with_name(tool + ".sha256"))
    return root


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],
                         ids=["ctrl-c", "sigterm", "sighup"])
def test_ctrl_c_during_up_leaves_no_orphans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
                                           sig: int, rc: int) -> None:
    """Ctrl-C (and SIGTERM, as CI cancellation sends, and SIGHUP) while ``up`` waits for its nodes. Deterministic on a busy machine: kwok is an idle
    stand-in, so no node ever becomes Ready and ``up`` waits until interrupted (a frozen real
    kwok was not enough: under load the test read "creating 50 …" after kwok had readied every
    node and ``up`` had exited 0). The interrupt is sent on that line; the cluster is torn down
    whatever happens."""
    root = Path(__file__).resolve().parents[2]
    # the cluster's state lives in the cache too: a short folder, as pytest's own under a worker's
    # can be too deep for the cluster's unix sockets (up then refuses it)
    short = Path(tempfile.mkdtemp(prefix="gc-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    cache = _cache_with_idle_kwok(short / "cache")
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(cache))
    name = f"ctrlc-{os.getpid()}"
    # Ctrl-C as a terminal delivers it: a run of the tests started in the background by a
    # non-interactive shell ignores SIGINT, and a Python started with SIGINT ignored keeps ignoring
    # it (up then never saw the test's interrupt and waited for its nodes until killed)
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from gpucatalog import cli; cli.COMMAND_MODULES=('cluster',); sys.exit(cli.main(sys.argv[1:]))")
    c = SimCluster(name)
    out = tmp_path / "up.err"
    # up's output goes to a file, not a pipe: its exit is waited for, not the end of a pipe that a
    # process it started could still hold
    with out.open("w") as err_fh:
        proc = subprocess.Popen([sys.executable, "-c", code, "cluster", "up", "--name", name, "--nodes", "50",
                                 "--timeout", "600"], env=dict(os.environ, PYTHONPATH=str(root)),
                                stdout=subprocess.DEVNULL, stderr=err_fh)
    try:
        deadline = time.monotonic() + 300
        while "creating 50 " not in out.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("up ended (or hung) before it created its nodes: " + out.read_text())
            time.sleep(0.05)
        recs = procs.read_all(c.layout.pids)
        assert {r.name for r in recs} >= {"supervisor", "kube-apiserver", "kwok"}, recs
        proc.send_signal(sig)
        t0 = time.monotonic()
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # the CLI writes its threads' stacks to stderr
            time.sleep(2)
            log = c.layout.logs / "supervisor.log"
            tail = log.read_text()[-2000:] if log.is_file() else "(no supervisor log)"
            pytest.fail(f"up did not exit within 300 s of Ctrl-C: {out.read_text()}\nsupervisor log: {tail}")
        assert proc.returncode == rc, out.read_text()
        assert not any(r.alive() for r in recs), f"alive {time.monotonic() - t0:.1f}s after Ctrl-C"
        # nothing else that names the cluster's folder either (a process up started but never recorded)
        left = [pid.name for pid in Path("/proc").iterdir() if pid.name.isdigit()
                and str(c.layout.root) in _cmdline(pid)]
        assert not left, f"processes of {name} left after Ctrl-C: {left}"
        assert not c.layout.root.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if c.layout.root.exists():
            c.down()


def _cmdline(pid: Path) -> str:
    try:
        return (pid / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _serving_cert(dns: str) -> tuple[bytes, bytes]:
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def test_admission_webhook_in_a_pod_is_reached_through_its_service(k8s_client: Any, sim_namespace: str) -> None:
    import base64

    ns = sim_namespace
    core = client.CoreV1Api(k8s_client)
    crt, key = _serving_cert(f"hook.{ns}.svc")
    core.create_namespaced_secret(ns, {"metadata": {"name": "hook-tls"}, "type": "kubernetes.io/tls",
                                       "data": {"tls.crt": base64.b64encode(crt).decode(),
                                                "tls.key": base64.b64encode(key).decode()}})
    client.AppsV1Api(k8s_client).create_namespaced_deployment(ns, {
        "metadata": {"name": "hook"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "hook"}},
                 "template": {"metadata": {"labels": {"app": "hook"}}, "spec": {
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": "ghcr.io/gpu-catalog/demo-webhook:0.1",
                                     "args": ["--port", "8443"],
                                     "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                                     "ports": [{"containerPort": 8443}],
                                     "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}]}],
                     "volumes": [{"name": "tls", "secret": {"secretName": "hook-tls"}}]}}}})
    core.create_namespaced_service(ns, {"metadata": {"name": "hook"}, "spec": {
        "selector": {"app": "hook"}, "ports": [{"port": 443, "targetPort": 8443}]}})
    disc = client.DiscoveryV1Api(k8s_client)
    wait("ready endpoint", lambda: any(
        e.conditions.ready for s in disc.list_namespaced_endpoint_slice(ns).items for e in (s.endpoints or [])))
    client.AdmissionregistrationV1Api(k8s_client).create_validating_webhook_configuration({
        "metadata": {"name": f"deny-{ns}"},
        "webhooks": [{"name": "deny.sim.gpu-catalog.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                      "failurePolicy": "Fail", "timeoutSeconds": 5,
                      "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                      "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                 "resources": ["pods"]}],
                      "clientConfig": {"service": {"namespace": ns, "name": "hook", "port": 443},
                                       "caBundle": base64.b64encode(crt).decode()}}]})
    try:
        denied = {"metadata": {"name": "bad", "labels": {"sim.gpu-catalog.dev/deny": "true"}},
                  "spec": {"containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.0-base"}]}}

        def rejected() -> bool:
            try:
                core.create_namespaced_pod(ns, denied)
            except client.ApiException as exc:
                return exc.status == 403 and "denied by demo-webhook" in str(exc.body)
            core.delete_namespaced_pod("bad", ns, grace_period_seconds=0)
            return False

        assert wait("webhook denies", rejected, timeout=30)
        core.create_namespaced_pod(ns, {"metadata": {"name": "good"},
                                        "spec": {"containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.0-base"}]}})
    finally:
        client.AdmissionregistrationV1Api(k8s_client).delete_validating_webhook_configuration(f"deny-{ns}")


def test_init_container_runs_before_main_and_failure_fails_pod(sim_cluster: SimCluster, k8s_client: Any,
                                                               sim_namespace: str) -> None:
    core = client.CoreV1Api(k8s_client)
    ns = sim_namespace
    core.create_namespaced_service_account(ns, {"metadata": {"name": "lister"}})
    # the init container lists pods once (needs the Role: fails with 3 without it)
    pod = {"metadata": {"name": "init-demo"}, "spec": {
        "serviceAccountName": "lister", "restartPolicy": "Never",
        "initContainers": [{"name": "init", "image": "ghcr.io/gpu-catalog/podlister:0.1", "args": ["--once"]}],
        "containers": [{"name": "main", "image": "ghcr.io/gpu-catalog/podlister:0.1", "args": ["--once"]}]}}
    wait("service account token ready", lambda: core.read_namespaced_service_account("lister", ns))
    core.create_namespaced_pod(ns, pod)
    failed = wait("pod failed in init", lambda: (lambda p: p if p.status.phase == "Failed" else None)(
        core.read_namespaced_pod("init-demo", ns)))
    assert failed.status.init_container_statuses[0].state.terminated.exit_code == 3
    assert not failed.status.container_statuses  # main never started
    rbac = client.RbacAuthorizationV1Api(k8s_client)
    rbac.create_namespaced_role(ns, {"metadata": {"name": "r"},
                                     "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "r"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "ServiceAccount", "name": "lister", "namespace": ns}]})
    pod["metadata"]["name"] = "init-demo-2"
    core.create_namespaced_pod(ns, pod)
    ok = wait("pod succeeded", lambda: (lambda p: p if p.status.phase == "Succeeded" else None)(
        core.read_namespaced_pod("init-demo-2", ns)))
    assert ok.status.init_container_statuses[0].state.terminated.exit_code == 0
    assert ok.status.container_statuses[0].state.terminated.exit_code == 0


def test_killed_component_is_restarted_and_logs_collected(sim_cluster: SimCluster, tmp_path: Path) -> None:
    rec = procs.read(sim_cluster.layout.pids / "kube-scheduler.pid")
    assert rec is not None
    os.kill(rec.pid, signal.SIGKILL)
    st = wait("scheduler restarted", lambda: (lambda s: s if s["components"]["kube-scheduler"]["restarts"] >= 1
                                              and s["components"]["kube-scheduler"]["alive"] else None)(
        sim_cluster.status()))
    assert st["healthy"]
    out = sim_cluster.collect_logs(tmp_path)
    assert (out / "kube-apiserver.log").stat().st_size > 0
    assert "supervisor: start kube-scheduler (restart 1)" in (out / "kube-scheduler.log").read_text()


def test_daemonset_pod_sees_its_own_node_folder_through_hostpath(sim_cluster: SimCluster, k8s_client: Any,
                                                                 sim_namespace: str) -> None:
    ns = sim_namespace
    sim_cluster.inject_fault("h100-node-0003", "xid", code=79, gpu=2)
    sim_cluster.inject_fault("h100-node-0003", "ib-rate", device="mlx5_1")
    try:
        client.AppsV1Api(k8s_client).create_namespaced_daemon_set(ns, {
            "metadata": {"name": "probe"},
            "spec": {"selector": {"matchLabels": {"app": "probe"}},
                     "template": {"metadata": {"labels": {"app": "probe"}}, "spec": {
                         "automountServiceAccountToken": False,
                         "containers": [{"name": "main", "image": "ghcr.io/gpu-catalog/podlister:0.1",
                                         "args": ["--cat", "/dev/kmsg", "--cat", "/host/sys/class/infiniband/mlx5_1/ports/1/rate",
                                                  "--once"],
                                         "volumeMounts": [{"name": "kmsg", "mountPath": "/dev/kmsg", "readOnly": True},
                                                          {"name": "sys", "mountPath": "/host/sys", "readOnly": True}]}],
                         "volumes": [{"name": "kmsg", "hostPath": {"path": "/dev/kmsg"}},
                                     {"name": "sys", "hostPath": {"path": "/sys"}}]}}}})
        core = client.CoreV1Api(k8s_client)

        def logs() -> dict[str, str] | None:
            pods = core.list_namespaced_pod(ns).items
            out = {p.spec.node_name: _pod_log(sim_cluster, p) for p in pods if p.spec.node_name}
            return out if len(out) == 8 and all("--- /host/sys" in v for v in out.values()) else None

        got = wait("8 daemon pods printed their files", logs, timeout=90)
        assert "NVRM: Xid (PCI:0000:3a:00): 79" in got["h100-node-0003"]
        assert "200 Gb/sec (2X NDR)" in got["h100-node-0003"]
        assert "NVRM: Xid" not in got["h100-node-0002"]
        assert "400 Gb/sec (4X NDR)" in got["h100-node-0002"]
    finally:
        sim_cluster.inject_fault("h100-node-0003", "clear")


def test_node_agent_assigns_gpus_to_reservation_pods(sim_cluster: SimCluster, k8s_client: Any) -> None:
    core = client.CoreV1Api(k8s_client)
    ns = "kai-resource-reservation"
    created = not any(n.metadata.name == ns for n in core.list_namespace().items)
    if created:
        core.create_namespace({"metadata": {"name": ns}})
    for i in range(2):
        core.create_namespaced_pod(ns, {"metadata": {"name": f"gpu-reservation-{i}"}, "spec": {
            "nodeName": "h100-node-0001", "containers": [{"name": "c", "image": "nvcr.io/nvidia/cuda:12.4.0-base",
                                                          "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    try:
        def annotated() -> list[str] | None:
            pods = core.list_namespaced_pod(ns).items
            vals = [(p.metadata.annotations or {}).get("run.ai/reserve_for_gpu_index") for p in pods]
            return [v for v in vals if v] if all(vals) and len(vals) == 2 else None

        uuids = wait("reservation annotations", annotated)
        import json as _json

        hw = _json.loads((sim_cluster.node_dir("h100-node-0001") / "sim" / "hw.json").read_text())
        assert set(uuids) <= {g["uuid"] for g in hw["gpus"]} and len(set(uuids)) == 2
    finally:
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        if created:  # the KAI chart owns this namespace in later tests of the same cluster
            core.delete_namespace(ns)
            wait("namespace kai-resource-reservation deleted",
                 lambda: not any(n.metadata.name == ns for n in core.list_namespace().items))
