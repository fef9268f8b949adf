"""Promotion policies: per channel, what evidence a bundle version needs to be promoted into it.

Loaded by ``promote`` from ``catalog/channels/policy.yaml``; a channel exists exactly when this
file defines it. Format::

    apiVersion: gpu-catalog.dev/v1alpha1
    kind: PromotionPolicy
    channels:
      candidate:
        requiredProfiles: [sim]         # one passing evidence per profile
        requiredSuites:                 # per bundle; "*" applies to every bundle
          "*": []
        requireBundleSuites: true       # plus every suite the bundle itself declares
        requiredKubernetes: ["1.35", "1.36"]  # passing evidence on each of these minors (optional)
      stable:
        sourceChannel: candidate        # only what is already in candidate, same digest
        requiredProfiles: [sim]
        requireBundleSuites: true
        requireUpgradeFrom: stable      # evidence of a certified upgrade from the version now
                                        # newest in this channel (none needed for a first version)
        userSuppliedBinaries: allow     # allow (default) | forbid | require binaries a user
                                        # brought through an image map (the entry lists them)

Which keys may sign for a channel is the trust file's business (``trust``), not this one's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucatalog.core import errors, yamlfile

NAME = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "channels"],
    "additionalProperties": False,
    "properties": {
        **yamlfile.header("PromotionPolicy"),
        "channels": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": NAME},
            "additionalProperties": {
                "type": "object",
                "required": ["requiredProfiles"],
                "additionalProperties": False,
                "properties": {
                    "description": {"type": "string"},
                    "sourceChannel": {"type": "string", "pattern": NAME},
                    "requiredProfiles": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                    "requiredSuites": {
                        "type": "object",
                        "additionalProperties": {"type": "array", "items": {"type": "string"}},
                    },
                    "requireBundleSuites": {"type": "boolean"},
                    "requireUpgradeFrom": {"type": "string", "pattern": NAME},
                    "requiredKubernetes": {"type": "array", "items": {"type": "string", "pattern": r"^v?1\.\d+$"}},
                    "userSuppliedBinaries": {"enum": ["allow", "forbid", "require"]},
                },
            },
        },
    },
}


@dataclass(frozen=True)
class ChannelPolicy:
    channel: str
    required_profiles: tuple[str, ...]
    required_suites: dict[str, tuple[str, ...]]
    require_bundle_suites: bool
    source_channel: str | None
    require_upgrade_from: str | None = None
    # Kubernetes minors ("1.35") each needing passing evidence of a required profile; empty: any one
    required_kubernetes: tuple[str, ...] = ()
    user_supplied_binaries: str = "allow"  # allow | forbid | require (an image map's binaries)

    def suites_for(self, bundle: str, bundle_suites: tuple[str, ...] = ()) -> list[str]:
        """Suites required of ``bundle``: the ``"*"`` list, its own list, and its declared suites."""
        out: list[str] = []
        for s in (*self.required_suites.get("*", ()), *self.required_suites.get(bundle, ()),
                  *(bundle_suites if self.require_bundle_suites else ())):
            if s not in out:
                out.append(s)
        return out


@dataclass(frozen=True)
class Policy:
    path: Path
    channels: dict[str, ChannelPolicy]
    digest: str = ""  # sha256 of the exact bytes parsed; recorded in every channel entry it admits

    def channel(self, name: str) -> ChannelPolicy:
        if name not in self.channels:
            raise errors.NotFoundError(
                f"unknown channel {name!r}", path=str(self.path), field="channels",
                expected="one of " + ", ".join(sorted(self.channels)),
            )
        return self.channels[name]


def load(path: Path) -> Policy:
    data = yamlfile.read_bytes(path, what="promotion policy")
    doc = yamlfile.parse_one(yamlfile.decode(data, path), path, SCHEMA)
    chans: dict[str, ChannelPolicy] = {}
    for name, c in doc["channels"].items():
        chans[name] = ChannelPolicy(
            channel=name,
            required_profiles=tuple(c["requiredProfiles"]),
            required_suites={b: tuple(s) for b, s in c.get("requiredSuites", {}).items()},
            require_bundle_suites=bool(c.get("requireBundleSuites", False)),
            source_channel=c.get("sourceChannel"),
            require_upgrade_from=c.get("requireUpgradeFrom"),
            required_kubernetes=tuple(str(m).lstrip("v") for m in c.get("requiredKubernetes", [])),
            user_supplied_binaries=str(c.get("userSuppliedBinaries", "allow")),
        )
    for name, c in chans.items():
        if c.source_channel is not None and c.source_channel not in chans:
            raise errors.SchemaError(f"sourceChannel {c.source_channel!r} is not a channel of this file",
                                     path=str(path), field=f"channels/{name}/sourceChannel")
        if c.require_upgrade_from is not None and c.require_upgrade_from not in chans:
            raise errors.SchemaError(f"requireUpgradeFrom {c.require_upgrade_from!r} is not a channel of this file",
                                     path=str(path), field=f"channels/{name}/requireUpgradeFrom")
        if c.source_channel == name:
            raise errors.SchemaError("a channel cannot be its own source", path=str(path),
                                     field=f"channels/{name}/sourceChannel")
    return Policy(path, chans, "sha256:" + hashlib.sha256(data).hexdigest())
