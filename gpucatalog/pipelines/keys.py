"""Ed25519 signing keys for certification evidence: generate, load, and name them by key id.

Called by ``catalog keys`` (generate), by ``evidence.write_evidence`` (load the signing key) and
by ``trust`` (key ids of trusted public keys). Private key material is never printed or logged:
only paths and key ids leave this module. A private key file readable by group or others is
refused, as ssh does, because a key others could copy proves nothing.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from gpucatalog.core import errors

PRIVATE_SUFFIX = ".key"
PUBLIC_SUFFIX = ".pub"


@dataclass(frozen=True)
class GeneratedKey:
    name: str
    keyid: str
    private_path: Path
    public_path: Path


def keyid(public_key: ed25519.Ed25519PublicKey) -> str:
    """sha256 (hex) of the DER SubjectPublicKeyInfo: stable, and derivable from the .pub file alone."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


def public_pem(public_key: ed25519.Ed25519PublicKey) -> str:
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def generate(out_dir: Path, name: str = "signing") -> GeneratedKey:
    """Write ``<name>.key`` (PKCS#8 PEM, mode 0600) and ``<name>.pub`` into ``out_dir``.

    Refuses (ConflictError) when either file exists: overwriting a key silently would orphan
    every piece of evidence signed with it.
    """
    return _write_pair(out_dir, name, ed25519.Ed25519PrivateKey.generate())


def _write_pair(out_dir: Path, name: str, key: ed25519.Ed25519PrivateKey) -> GeneratedKey:
    if not name or "/" in name or name.startswith("."):
        raise errors.InputError(f"bad key name {name!r}", field="--name", expected="a plain file name, e.g. ci")
    out_dir.mkdir(parents=True, exist_ok=True)
    priv_path = out_dir / (name + PRIVATE_SUFFIX)
    pub_path = out_dir / (name + PUBLIC_SUFFIX)
    for p in (priv_path, pub_path):
        if p.exists():
            raise errors.ConflictError("refusing to overwrite an existing key", path=str(p))
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # O_EXCL closes the race with a concurrent generate; mode 0600 from the first byte on.
    try:
        fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise errors.ConflictError("refusing to overwrite an existing key", path=str(priv_path)) from exc
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(priv_path, 0o600)  # in case umask or a filesystem widened it
    pub = key.public_key()
    pub_path.write_text(public_pem(pub))
    return GeneratedKey(name=name, keyid=keyid(pub), private_path=priv_path, public_path=pub_path)


def import_from_env(var: str, out_dir: Path, name: str) -> GeneratedKey:
    """Write the PEM private key held in environment variable ``var`` (a CI secret) to
    ``<name>.key`` (0600) and its ``.pub``, so CI needs no shell to put a secret on disk."""
    pem = os.environ.get(var, "")
    if not pem.strip():
        raise errors.InputError(f"environment variable {var} is empty or unset", field=var,
                                expected="an Ed25519 PEM private key")
    try:
        key = serialization.load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise errors.InputError(f"{var} does not hold an unencrypted PEM private key", field=var) from exc
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise errors.InputError(f"{var} does not hold an Ed25519 key", field=var, expected="Ed25519")
    return _write_pair(out_dir, name, key)


def load_private(path: Path) -> ed25519.Ed25519PrivateKey:
    """Load an Ed25519 private key, refusing one whose file group or others may read or write."""
    try:
        st = path.stat()
    except FileNotFoundError as exc:
        raise errors.NotFoundError("signing key not found", path=str(path)) from exc
    if not stat.S_ISREG(st.st_mode):
        raise errors.InputError("signing key is not a regular file", path=str(path))
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise errors.InputError(
            f"private key permissions {mode:04o} are too open; run: chmod 600 {path}",
            path=str(path),
            expected="mode 0600 (owner only)",
        )
    data = path.read_bytes()
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        # Never echo the file's content: the message names only the path and the kind of problem.
        raise errors.InputError(
            "not an unencrypted PEM private key", path=str(path), expected="a key from `catalog keys generate`"
        ) from exc
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise errors.InputError("not an Ed25519 key", path=str(path), expected="Ed25519")
    return key


def parse_public(pem: str | bytes, where: str = "") -> ed25519.Ed25519PublicKey:
    data = pem.encode() if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise errors.InputError("not a PEM public key", path=where or None, expected="SubjectPublicKeyInfo PEM") from exc
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise errors.InputError("not an Ed25519 public key", path=where or None, expected="Ed25519")
    return key


def load_public(path: Path) -> ed25519.Ed25519PublicKey:
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise errors.NotFoundError("public key not found", path=str(path)) from exc
    return parse_public(data, str(path))


def default_key_dir() -> Path:
    return Path(os.environ.get("CATALOG_KEY_DIR", Path.home() / ".config" / "gpu-catalog" / "keys"))


def local_key(say: Callable[[str], None]) -> Path:
    """This machine's evidence-signing key (``local.key``), generated on first use.

    A generated key is trusted for no channel until someone runs ``catalog keys trust``; it
    lets a first ``certify`` sign its evidence without extra steps.
    """
    d = default_key_dir()
    path = d / "local.key"
    if not path.exists():
        generated = generate(d, "local")
        say(f"generated a local signing key {generated.private_path} (trust it with: catalog keys trust {generated.public_path} --name local --channel candidate)")
    load_private(path)
    return path
