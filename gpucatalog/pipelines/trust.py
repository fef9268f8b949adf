"""The trust file: which public keys may sign certification evidence for which channel.

Loaded by ``promote`` (and ``catalog keys trust``, which adds a key). Format::

    apiVersion: gpu-catalog.dev/v1alpha1
    kind: TrustFile
    keys:
      - name: ci
        keyid: 3f2a…              # sha256 of the DER public key; checked against publicKey
        channels: [candidate, stable]
        publicKey: |
          -----BEGIN PUBLIC KEY-----
          …

A key id that does not match its public key is bad input: it would make reviewers trust one key
while another is used.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives.asymmetric import ed25519

from gpucatalog.core import errors, yamlfile
from gpucatalog.pipelines import keys

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "keys"],
    "additionalProperties": False,
    "properties": {
        **yamlfile.header("TrustFile"),
        "keys": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "publicKey", "channels"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "keyid": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                    "publicKey": {"type": "string", "pattern": "BEGIN PUBLIC KEY"},
                    "channels": {"type": "array", "items": {"type": "string", "minLength": 1}},
                },
            },
        },
    },
}


@dataclass(frozen=True)
class TrustedKey:
    name: str
    keyid: str
    public_key: ed25519.Ed25519PublicKey
    channels: tuple[str, ...]


@dataclass(frozen=True)
class TrustFile:
    path: Path
    keys: tuple[TrustedKey, ...]
    digest: str = ""  # sha256 of the exact bytes parsed; recorded in every channel entry it admits

    def for_channel(self, channel: str) -> dict[str, ed25519.Ed25519PublicKey]:
        """keyid -> public key of every key allowed to sign evidence for ``channel``."""
        return {k.keyid: k.public_key for k in self.keys if channel in k.channels}

    def name_of(self, keyid: str) -> str:
        return next((k.name for k in self.keys if k.keyid == keyid), keyid[:16])


def load(path: Path) -> TrustFile:
    data = yamlfile.read_bytes(path, what="trust file")
    doc = yamlfile.parse_one(yamlfile.decode(data, path), path, SCHEMA)
    out: list[TrustedKey] = []
    for i, k in enumerate(doc["keys"]):
        pub = keys.parse_public(k["publicKey"], f"{path} keys[{i}]")
        kid = keys.keyid(pub)
        if k.get("keyid") and k["keyid"] != kid:
            raise errors.SchemaError(
                f"keyid does not match publicKey (computed {kid})", path=str(path), field=f"keys/{i}/keyid"
            )
        out.append(TrustedKey(k["name"], kid, pub, tuple(k["channels"])))
    return TrustFile(path, tuple(out), "sha256:" + hashlib.sha256(data).hexdigest())


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (PEM) as literal blocks, so the trust file reads like the .pub."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def add_key(path: Path, name: str, public_key: ed25519.Ed25519PublicKey, channels: list[str]) -> str:
    """Add (or replace, by name) a key in the trust file, creating the file if absent."""
    if path.exists():
        load(path)  # refuse to rewrite a file that is already invalid
        doc: dict[str, Any] = yamlfile.load_data(path)
    else:
        doc = {"apiVersion": yamlfile.API_VERSION, "kind": "TrustFile", "keys": []}
    kid = keys.keyid(public_key)
    doc["keys"] = [k for k in doc["keys"] if k["name"] != name]
    doc["keys"].append({"name": name, "keyid": kid, "channels": channels, "publicKey": keys.public_pem(public_key)})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.dump(doc, Dumper=_Dumper, sort_keys=False))
    tmp.replace(path)
    return kid
