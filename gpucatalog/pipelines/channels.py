"""Channel files: the append-only list of bundle versions promoted into a channel.

``catalog/channels/<name>.yaml``, written only by ``promote`` through ``append``: the folder is
locked (``flock`` on the directory, so no lock file litters the catalog), the file re-read, the
caller's checks run against what is there *now*, and the new entry appended by writing a temp
file, fsync, rename and fsync of the folder. Earlier bytes are kept verbatim, so an append never
rewrites history. Two concurrent promotions serialize on the lock and neither loses its entry.
Read by ``catalog install`` (``load``, ``latest``).
"""

from __future__ import annotations

import fcntl
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
ENTRY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["bundle", "version", "digest", "promotedAt", "promotedBy", "evidenceDigest"],
    "additionalProperties": False,
    "properties": {
        "bundle": {"type": "string", "minLength": 1},
        "version": {"type": "string", "minLength": 1},
        "digest": {"type": "string", "pattern": DIGEST},
        "promotedAt": {"type": "string", "minLength": 1},
        "promotedBy": {"type": "string", "minLength": 1},
        "evidenceDigest": {"type": "string", "pattern": DIGEST},
        # One item per required profile (the first is repeated in digest/evidenceDigest).
        "evidence": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["profile", "digest", "evidenceDigest", "signer"],
                "additionalProperties": False,
                "properties": {
                    "profile": {"type": "string"},
                    "digest": {"type": "string", "pattern": DIGEST},
                    "evidenceDigest": {"type": "string", "pattern": DIGEST},
                    "signer": {"type": "string"},
                },
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
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Channel(name, path, (), b"")
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise errors.InputError("channel file is not UTF-8 text", path=str(path)) from exc
    doc = yamlfile.parse_one(text, path, SCHEMA)
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


def _render(ch: Channel, entry: dict[str, Any]) -> bytes:
    item = yaml.safe_dump([entry], sort_keys=False, default_flow_style=False).encode()
    if not ch.raw or not ch.entries:
        doc = {"apiVersion": yamlfile.API_VERSION, "kind": "Channel", "channel": ch.name, "entries": []}
        head = yaml.safe_dump(doc, sort_keys=False).replace("entries: []\n", "entries:\n").encode()
        return head + item
    return (ch.raw if ch.raw.endswith(b"\n") else ch.raw + b"\n") + item


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


def append(channels_dir: Path, name: str, make_entry: Callable[[Channel], dict[str, Any]]) -> dict[str, Any]:
    """Under the lock: load the channel, let ``make_entry`` check it (raise to refuse) and build
    the entry, then append it atomically. Returns the entry written."""
    with locked(channels_dir):
        ch = load(channels_dir, name)
        entry = make_entry(ch)
        data = _render(ch, entry)
        # Re-parse what we are about to write: it must be exactly the old entries plus ours.
        check = yamlfile.parse_one(data.decode(), ch.path, SCHEMA)
        if check["entries"] != [*ch.entries, entry]:
            raise errors.InputError("channel file layout does not allow appending; "
                                           "'entries' must be the last key", path=str(ch.path))
        _write_atomic(ch.path, data)
        return entry


def versions_in(catalog_root: Path, channel: str, bundle: str) -> list[str]:
    """Promoted versions of ``bundle`` in ``channel``, oldest first; an unknown channel is bad input."""
    from gpucatalog.catalog import versions
    from gpucatalog.pipelines import policy

    policy.load(catalog_root / "channels" / "policy.yaml").channel(channel)  # raises for unknown names
    return versions.sort_versions(load(catalog_root / "channels", channel).versions(bundle))
