"""Per-cluster PKI and kubeconfigs for the sim control plane.

Called once by ``cluster.up``: one CA, a serving certificate for kube-apiserver (SANs for
127.0.0.1 and the in-cluster service names), a client certificate per control-plane identity
(admin in system:masters, kube-controller-manager, kube-scheduler, kwok, the sim kubelet), the
front-proxy client, the API server's client of the nodes' kubelet API, and the ServiceAccount token signing key. ECDSA P-256 keeps generation
in milliseconds. Every file is written 0600 under ``<state>/pki``.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# identity -> (CN, O): the names kube-apiserver's RBAC bootstrap policy binds.
CLIENTS: dict[str, tuple[str, str | None]] = {
    "admin": ("sim-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    # kwok writes status of every node and pod; the sim kubelet requests tokens for any
    # ServiceAccount: both act as the node components of every simulated node.
    "kwok": ("system:sim-kwok", "system:masters"),
    "sim-kubelet": ("system:sim-kubelet", "system:masters"),
    "front-proxy-client": ("front-proxy-client", None),
    # what the API server shows a node's kubelet API (exec, logs): the only client it accepts
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", None),
}

SERVICE_DNS = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
]
SERVICE_IP = "10.96.0.1"  # first address of --service-cluster-ip-range


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def crt(self, who: str) -> Path:
        return self.dir / f"{who}.crt"

    def key(self, who: str) -> Path:
        return self.dir / f"{who}.key"


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _sign(
    subject: x509.Name,
    pub: ec.EllipticCurvePublicKey,
    ca_name: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(pub)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        b = b.add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(ca_key, hashes.SHA256())


def generate(dir: Path) -> Pki:
    """Write a fresh CA, serving and client certificates and the SA key into ``dir``."""
    dir.mkdir(parents=True, exist_ok=True)
    pki = Pki(dir)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("gpu-catalog-sim-ca")
    ca = _sign(ca_name, ca_key.public_key(), ca_name, ca_key, ca=True)
    _write(pki.ca_key, _key_pem(ca_key))
    _write(pki.ca_crt, ca.public_bytes(serialization.Encoding.PEM))

    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in SERVICE_DNS]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", SERVICE_IP)]
    key = ec.generate_private_key(ec.SECP256R1())
    crt = _sign(_name("kube-apiserver"), key.public_key(), ca_name, ca_key, server=True, sans=sans)
    _write(pki.key("apiserver"), _key_pem(key))
    _write(pki.crt("apiserver"), crt.public_bytes(serialization.Encoding.PEM))

    # the nodes' kubelet API (the sim kubelet's, which relays to kwok's; both serve with it), which
    # the API server dials at 127.0.0.1
    key = ec.generate_private_key(ec.SECP256R1())
    crt = _sign(_name("sim-kubelet-server"), key.public_key(), ca_name, ca_key, server=True,
                sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    _write(pki.key("kubelet-server"), _key_pem(key))
    _write(pki.crt("kubelet-server"), crt.public_bytes(serialization.Encoding.PEM))

    for who, (cn, org) in CLIENTS.items():
        key = ec.generate_private_key(ec.SECP256R1())
        crt = _sign(_name(cn, org), key.public_key(), ca_name, ca_key)
        _write(pki.key(who), _key_pem(key))
        _write(pki.crt(who), crt.public_bytes(serialization.Encoding.PEM))

    sa = ec.generate_private_key(ec.SECP256R1())
    _write(pki.sa_key, _key_pem(sa))
    _write(
        pki.sa_pub,
        sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    return pki


def kubeconfig_doc(server: str, ca: Path, *, cert: Path | None = None, key: Path | None = None,
                   token_file: Path | None = None, user: str = "sim-admin", cluster: str = "sim") -> dict[str, object]:
    """A kubeconfig with one context; client certificate or a token file for the user."""
    creds: dict[str, str] = {}
    if cert and key:
        creds = {"client-certificate": str(cert), "client-key": str(key)}
    if token_file:
        creds = {"tokenFile": str(token_file)}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }


def write_kubeconfig(path: Path, doc: dict[str, object]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, yaml.safe_dump(doc, sort_keys=False).encode())
    return path
