"""The certification log scan reads pod logs through a real API server, which fetches them from
a node's kubelet endpoint (here a small HTTPS log server on loopback standing in for the
kubelet's /containerLogs, the one part no bare API server has). KAI's shipped declaration makes
any RBAC denial (``forbidden: User "…"``) fail the run; the logs are kept with the evidence."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gpucatalog.catalog import loader, render
from gpucatalog.pipelines import logscan
from gpucatalog.validators.conformance.kit import kube_client
from tests.validators.conformance.apiserver import api_server

pytestmark = pytest.mark.integration

LOGS: dict[tuple[str, str, str, bool], str] = {}


class _KubeletLogs(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        parts = url.path.split("/")  # /containerLogs/<ns>/<pod>/<container>
        previous = urllib.parse.parse_qs(url.query).get("previous") == ["true"]
        text = LOGS.get((parts[2], parts[3], parts[4], previous)) if len(parts) == 5 else None
        self.send_response(200 if text is not None else 404)
        self.end_headers()
        self.wfile.write((text if text is not None else "no such log").encode())

    def log_message(self, *_args: object) -> None:
        return None


def _cert(d: Path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubelet")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .sign(key, hashes.SHA256()))
    (d / "k.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (d / "k.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "k.crt", d / "k.key")
    return ctx


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, kube_client.Kube]]:
    d = tmp_path_factory.mktemp("logscan")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KubeletLogs)
    server.socket = _cert(d).wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with api_server(d / "api") as kc:
        kube = kube_client.Kube(str(kc))
        kube.core.create_node({"metadata": {"name": "node-1"}})
        kube.core.patch_node_status("node-1", {"status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": server.server_address[1]}}}})
        yield kc, kube
        kube.close()
    server.shutdown()
    server.server_close()


def _pod(kube: kube_client.Kube, ns: str, name: str, restarts: int = 0) -> None:
    if not any(n.metadata.name == ns for n in kube.core.list_namespace().items):
        kube.core.create_namespace({"metadata": {"name": ns}})
        kube.core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    kube.core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
        "nodeName": "node-1", "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}})
    kube.core.patch_namespaced_pod_status(name, ns, {"status": {"phase": "Running", "containerStatuses": [{
        "name": "main", "image": "registry.k8s.io/pause:3.10", "imageID": "", "ready": True,
        "restartCount": restarts, "state": {"running": {}}}]}})


def test_a_forbidden_line_in_a_kai_log_fails_and_logs_are_kept(cluster: tuple[Path, kube_client.Kube],
                                                               tmp_path: Path) -> None:
    kc, kube = cluster
    rb = render.render_bundle(loader.load_catalog(), "gpu-scheduling", "sim")
    _pod(kube, "kai-scheduler", "kai-operator-0")
    _pod(kube, "kai-scheduler", "binder-0", restarts=1)
    _pod(kube, "gpu-health", "agent-0")  # gpu-health declares no pattern: not scanned
    LOGS[("kai-scheduler", "kai-operator-0", "main", False)] = "reconciled kai-config\nall good\n"
    # a 403 that is no RBAC denial: a create in a namespace being deleted (KAI binding a pod of a
    # suite's namespace the suite is removing)
    LOGS[("kai-scheduler", "binder-0", "main", False)] = (
        'binder up\nFailed to bind pod ns-1/p-9: bindrequests.scheduling.run.ai "p-9" is forbidden: unable to create '
        'new content in namespace ns-1 because it is being terminated\n')
    LOGS[("kai-scheduler", "binder-0", "main", True)] = (
        'E1202 failed to create pod: pods "x" is forbidden: User "system:serviceaccount:kai-scheduler:binder" '
        'cannot create resource "pods" in API group "" in the namespace "kai-resource-reservation"\n')
    LOGS[("gpu-health", "agent-0", "main", False)] = "forbidden words are fine here\n"

    result = logscan.scan(rb, kc, tmp_path / "pods")
    assert result is not None and result.name == "logs"
    (case,) = result.cases
    assert case.name == "kai-scheduler-logs" and case.result == "failed"
    assert case.reason.startswith("1 log line(s) of kai-scheduler match a fatal pattern (an RBAC denial")
    assert "first in kai-scheduler/binder-0/main (previous): E1202 failed to create pod" in case.reason
    assert case.details["namespaces"] == ["kai-scheduler", "kai-resource-reservation"]
    assert case.details["logs_read"] == 3
    assert (tmp_path / "pods/kai-scheduler/binder-0/main.previous.log").read_text().startswith("E1202")
    assert not (tmp_path / "pods/gpu-health").exists()

    # Clean logs pass; a log the API cannot serve is listed, not guessed at.
    LOGS[("kai-scheduler", "binder-0", "main", True)] = "restarted once, no denial\n"
    _pod(kube, "kai-resource-reservation", "gpu-reservation-0")
    result = logscan.scan(rb, kc)
    assert result is not None
    (case,) = result.cases
    assert case.result == "passed", case.reason
    assert case.details["unreadable"] and "kai-resource-reservation/gpu-reservation-0/main" in case.details["unreadable"][0]
