"""The sim kubelet's image map (``data/images.yaml``): which images run as real processes.

Used by the sim kubelet (to build a container's argv) and by ``stages`` (to tell kwok, through a
jq selector, to leave those pods alone). Matching ignores tag and digest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpucatalog.core import errors


@dataclass(frozen=True)
class ImageEntry:
    image: str
    entrypoint: tuple[str, ...]
    commands: dict[str, tuple[str, ...]]


def repository(ref: str) -> str:
    """Image reference without tag or digest: ``ghcr.io/x/y:1.2@sha256:…`` -> ``ghcr.io/x/y``."""
    ref = ref.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref = ref[: len(ref) - len(last)] + last.split(":", 1)[0]
    return ref


@cache
def image_map() -> dict[str, ImageEntry]:
    text = resources.files("gpucatalog.clusters.sim").joinpath("data/images.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    out: dict[str, ImageEntry] = {}
    for e in doc["images"]:
        out[e["image"]] = ImageEntry(
            image=e["image"],
            entrypoint=tuple(e["entrypoint"]),
            commands={k: tuple(v) for k, v in (e.get("commands") or {}).items()},
        )
    return out


def lookup(ref: str) -> ImageEntry | None:
    return image_map().get(repository(ref))


def argv_for(container: dict[str, Any]) -> list[str]:
    """Host argv for a container of a mapped image (Kubernetes command/args semantics)."""
    entry = lookup(str(container.get("image", "")))
    if entry is None:
        raise errors.NotFoundError(f"image {container.get('image')!r} is not in the sim image map")
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    if not command:
        return [*entry.entrypoint, *args]
    prefix = entry.commands.get(command[0]) or entry.commands.get(command[0].rsplit("/", 1)[-1])
    if prefix is None:
        raise errors.NotFoundError(
            f"executable {command[0]!r} not found in image {entry.image}", expected=", ".join(entry.commands)
        )
    return [*prefix, *command[1:], *args]


def kwok_exclusion_jq() -> str:
    """jq expression true for pods with at least one container of a mapped image."""
    repos = json.dumps(sorted(image_map()))
    return (
        f"{repos} as $sim | [(.spec.containers // [])[] | .image | sub(\"@.*$\"; \"\") "
        "| sub(\":[^:/]*$\"; \"\") | select(. as $r | any($sim[]; . == $r))] | length > 0"
    )
