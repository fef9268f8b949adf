"""A bare Kubernetes API server (etcd + kube-apiserver from the pinned toolchain) for tests that
need the real API but no nodes or controllers: CRD acceptance, strict decoding, and the KAI
suites' fail-fast preflight. Bound to 127.0.0.1; torn down with its processes' group.

Used by tests/validators/conformance/kai/test_suites_api.py until the sim cluster fixture replaces it.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from gpucatalog.core import executor
from gpucatalog.toolchain import build


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_key(path: Path) -> rsa.RSAPrivateKey:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return key


def _serving_cert(d: Path) -> None:
    key = _write_key(d / "serving.key")
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    (d / "serving.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def api_server(workdir: Path) -> Iterator[Path]:
    """Start etcd and kube-apiserver; yield an admin kubeconfig path."""
    etcd = build.ensure("etcd")
    apiserver = build.ensure("kube-apiserver")
    kubectl = build.ensure("kubectl")
    workdir.mkdir(parents=True, exist_ok=True)
    _serving_cert(workdir)
    sa = _write_key(workdir / "sa.key")
    (workdir / "sa.pub").write_bytes(sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    (workdir / "tokens.csv").write_text("test-admin-token,admin,admin,system:masters\n")
    client_port, peer_port, api_port = _free_port(), _free_port(), _free_port()
    procs = [executor.spawn([etcd, "--data-dir", workdir / "etcd",
                             "--listen-client-urls", f"http://127.0.0.1:{client_port}",
                             "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
                             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                             "--initial-cluster", f"default=http://127.0.0.1:{peer_port}"],
                            log_path=workdir / "etcd.log")]
    try:
        procs.append(executor.spawn([
            apiserver, "--etcd-servers", f"http://127.0.0.1:{client_port}", "--bind-address", "127.0.0.1",
            "--secure-port", str(api_port), "--tls-cert-file", workdir / "serving.crt",
            "--tls-private-key-file", workdir / "serving.key", "--token-auth-file", workdir / "tokens.csv",
            "--service-account-key-file", workdir / "sa.pub", "--service-account-signing-key-file",
            workdir / "sa.key", "--service-account-issuer", "https://kubernetes.default.svc",
            "--authorization-mode", "RBAC", "--service-cluster-ip-range", "10.96.0.0/16",
            "--allow-privileged=true"],  # as a real cluster's (and the sim's): the fault injector pod
            log_path=workdir / "apiserver.log"))
        kubeconfig = workdir / "kubeconfig"
        kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
            f"clusters: [{{name: t, cluster: {{server: 'https://127.0.0.1:{api_port}', "
            f"certificate-authority: '{workdir / 'serving.crt'}'}}}}]\n"
            "users: [{name: a, user: {token: test-admin-token}}]\n"
            "contexts: [{name: t, context: {cluster: t, user: a}}]\n")
        deadline = time.monotonic() + 90
        while True:
            probe = executor.run([kubectl, "--kubeconfig", kubeconfig, "get", "--raw", "/readyz"], check=False)
            if probe.returncode == 0:
                break
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                log = (workdir / "apiserver.log").read_text()[-2000:]
                raise RuntimeError(f"kube-apiserver did not become ready:\n{log}")
            time.sleep(0.5)
        yield kubeconfig
    finally:
        for proc in reversed(procs):
            _stop(proc)
