"""Channel files: the append-only list of bundle versions promoted into a channel.

``catalog/channels/<name>.yaml``, written only by ``promote`` through ``append``: the folder is
locked (``flock`` on the directory, so no lock file litters the catalog), the file re-read, the
caller's checks run against what is there *now*, and the new entry appended by writing a temp
file, fsync, rename and fsync of the folder. Two concurrent promotions serialize on the lock and
neither loses its entry. Read by ``catalog install`` (``load``) and ``pipelines.certified``.

Append-only in fact: the file is read strictly (a second ``entries:`` key, which YAML would let
silently replace the first list, is refused), and whatever is written must parse back to exactly
the entries read plus the new one. The new entry is appended to the earlier bytes, kept
verbatim; when the file's layout does not allow that (``entries`` not last, a flow list, a
document end marker) the file is re-serialised from its entries, again only if that round-trips.

The evidence each entry names is kept beside the channels, content-addressed
(``evidence/<sha256>.dsse.json``), so ``install`` can verify an entry's signature against the
repository's trust file without the CI artifact that produced it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpucatalog.core import errors, yamlfile

DIGEST = "^sha256:[0-9a-f]{64}$"
EVIDENCE_DIR = "evidence"  # beside the channel files: <sha256 hex>.dsse.json
MAX_CHANNEL_BYTES = 16 << 20
ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["bundle", "version", "digest", "promotedAt", "promotedBy", "evidenceDigest", "evidence",
                 "policyDigest", "trustDigest"],
    "additionalProperties": False,
    "properties": {
        "bundle": {"type": "string", "minLength": 1},
        "version": {"type": "string", "minLength": 1},
        "digest": {"type": "string", "pattern": DIGEST},
        "promotedAt": {"type": "string", "minLength": 1},
        "promotedBy": {"type": "string", "minLength": 1},
        "evidenceDigest": {"type": "string", "pattern": DIGEST},
        # sha256 of the policy and trust files (bytes) of the repository that admitted the entry
        "policyDigest": {"type": "string", "pattern": DIGEST},
        "trustDigest": {"type": "string", "pattern": DIGEST},
        # One item per required profile (the first is repeated in digest/evidenceDigest).
        "evidence": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["profile", "digest", "evidenceDigest", "signer"],
                "additionalProperties": False,
                "properties": {
                    "profile": {"type": "string", "minLength": 1},
                    "digest": {"type": "string", "pattern": DIGEST},
                    "evidenceDigest": {"type": "string", "pattern": DIGEST},
                    "signer": {"type": "string"},
                    # the Kubernetes release the evidence ran on (absent in entries before minors)
                    "kubernetes": {"type": "string"},
                    # binaries a user supplied through an image map, as the evidence recorded them
                    "userSupplied": {"type": "array", "items": {
                        "type": "object", "additionalProperties": False,
                        "properties": {k: {"type": ["string", "null"]} for k in ("image", "executable", "sha256", "version")}}},
                },
            },
        },
        # The certified upgrade a channel's policy required (requireUpgradeFrom): from which
        # version of which channel, and the evidence that shows it.
        "upgradeFrom": {
            "type": "object",
            "required": ["channel", "version", "digest", "evidenceDigest"],
            "additionalProperties": False,
            "properties": {
                "channel": {"type": "string", "minLength": 1},
                "version": {"type": "string", "minLength": 1},
                "digest": {"type": "string", "pattern": DIGEST},
                "evidenceDigest": {"type": "string", "pattern": DIGEST},
            },
        },
    },
}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "channel", "entries"],
    "additionalProperties": False,
    # "entries" must stay the last key: appends add list items at the end of the file.
    "properties": {
        **yamlfile.header("Channel"),
        "channel": {"type": "string", "minLength": 1},
        "entries": {"type": "array", "items": ENTRY_SCHEMA},
    },
}


@dataclass(frozen=True)
class Channel:
    name: str
    path: Path
    entries: tuple[dict[str, Any], ...]
    raw: bytes  # b"" when the file does not exist yet

    def find(self, bundle: str, version: str) -> dict[str, Any] | None:
        return next((e for e in self.entries if e["bundle"] == bundle and e["version"] == version), None)

    def versions(self, bundle: str) -> list[str]:
        return [e["version"] for e in self.entries if e["bundle"] == bundle]


def path_of(channels_dir: Path, name: str) -> Path:
    return channels_dir / f"{name}.yaml"


def load(channels_dir: Path, name: str) -> Channel:
    """The channel's current entries; an absent file is an empty channel (nothing promoted yet)."""
    path = path_of(channels_dir, name)
    if path.is_symlink():
        # promote replaces the file by rename: a link would be silently cut, or point elsewhere
        raise errors.InputError("channel file is a symlink; channel files are written only by `catalog promote`",
                                path=str(path))
    if not path.exists():
        return Channel(name, path, (), b"")
    raw = yamlfile.read_bytes(path, MAX_CHANNEL_BYTES, what="channel file")
    doc = yamlfile.parse_one(yamlfile.decode(raw, path), path, SCHEMA)
    if doc["channel"] != name:
        raise errors.SchemaError(f"file names channel {doc['channel']!r}", path=str(path),
                                        field="channel", expected=name)
    return Channel(name, path, tuple(doc["entries"]), raw)


@contextmanager
def locked(channels_dir: Path) -> Iterator[None]:
    channels_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(channels_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _fresh(ch: Channel, entries: list[dict[str, Any]]) -> bytes:
    """The whole file serialised from its entries (used when appending bytes is not possible)."""
    doc = {"apiVersion": yamlfile.API_VERSION, "kind": "Channel", "channel": ch.name, "entries": []}
    head = yaml.safe_dump(doc, sort_keys=False).replace("entries: []\n", "entries:\n").encode()
    return head + yaml.safe_dump(entries, sort_keys=False, default_flow_style=False).encode()


def _candidates(ch: Channel, entry: dict[str, Any]) -> list[bytes]:
    """What to write, best first: the earlier bytes verbatim plus the new item, then a fresh file."""
    out = []
    if ch.raw and ch.entries:
        item = yaml.safe_dump([entry], sort_keys=False, default_flow_style=False).encode()
        out.append((ch.raw if ch.raw.endswith(b"\n") else ch.raw + b"\n") + item)
    out.append(_fresh(ch, [*ch.entries, entry]))
    return out


def _round_trips(ch: Channel, data: bytes, want: list[dict[str, Any]]) -> bool:
    try:
        doc = yamlfile.parse_one(data.decode(), ch.path, SCHEMA)
    except errors.InputError:
        return False
    return bool(doc["entries"] == want and doc["channel"] == ch.name)


def store_evidence(channels_dir: Path, envelope: bytes) -> str:
    """Keep an evidence envelope beside the channels, named by its sha256; returns the digest."""
    hexd = hashlib.sha256(envelope).hexdigest()
    path = channels_dir / EVIDENCE_DIR / f"{hexd}.dsse.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and not path.is_symlink() and path.read_bytes() == envelope:
        return "sha256:" + hexd
    _write_atomic(path, envelope)
    return "sha256:" + hexd


def stored_evidence(channels_dir: Path, digest: str) -> Path:
    """The stored envelope named by ``digest`` (``sha256:<hex>``)."""
    return channels_dir / EVIDENCE_DIR / f"{digest.removeprefix('sha256:')}.dsse.json"


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.rename(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)  # the rename itself must survive a crash
    finally:
        os.close(dfd)


def append(
    channels_dir: Path,
    name: str,
    make_entry: Callable[[Channel], dict[str, Any]],
    evidence: list[bytes] | None = None,
) -> dict[str, Any]:
    """Under the lock: load the channel, let ``make_entry`` check it (raise to refuse) and build
    the entry, store the ``evidence`` envelopes it names, then append it atomically. Returns the
    entry written."""
    with locked(channels_dir):
        ch = load(channels_dir, name)
        entry = make_entry(ch)
        want = [*ch.entries, entry]
        # Whatever is written must parse back to exactly the old entries plus ours.
        data = next((d for d in _candidates(ch, entry) if _round_trips(ch, d, want)), None)
        if data is None:
            raise errors.InputError("channel file cannot be appended to without changing its entries",
                                    path=str(ch.path), expected="a file written by `catalog promote`")
        for envelope in evidence or []:
            store_evidence(channels_dir, envelope)
        _write_atomic(ch.path, data)
        return entry


def versions_in(catalog_root: Path, channel: str, bundle: str) -> list[str]:
    """Promoted versions of ``bundle`` in ``channel``, oldest first; an unknown channel is bad input."""
    from gpucatalog.catalog import versions
    from gpucatalog.pipelines import policy

    policy.load(catalog_root / "channels" / "policy.yaml").channel(channel)  # raises for unknown names
    return versions.sort_versions(load(catalog_root / "channels", channel).versions(bundle))
