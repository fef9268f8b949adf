"""Bring-your-own binaries: an image-map overlay file that maps container images to executables
on this host, merged over the shipped map (``data/images.yaml``) by :mod:`.images`.

Read by ``catalog cluster up --image-map FILE`` and ``catalog certify --image-map FILE`` (or
``$GPU_CATALOG_IMAGE_MAP``) through ``SimCluster``, validated before anything starts: the JSON
Schema below (an unknown field is bad input naming file, line and field), each executable must
exist and be executable, each image appear once; any problem is exit 2. Each mapped executable's
sha256 and reported version (:mod:`.binversion`) are recorded once, at load, and kept with the
cluster (``<state>/image-map.json``) for the evidence.

Format::

    apiVersion: gpu-catalog.dev/v1alpha1
    kind: SimImageMapOverlay
    images:
      - image: ghcr.io/kai-scheduler/kai-scheduler/scheduler   # repository; any tag matches
        executable: /opt/kai/v0.16.8/scheduler                  # absolute, or relative to this file
        entrypoint: /workspace/app                              # the image's ENTRYPOINT program
        versionArgs: [--version]                                # optional: how to ask its version
      - image: ghcr.io/kai-scheduler/kai-scheduler/scheduler:v0.17.0   # this tag only (before
        executable: /opt/kai/v0.17.0/scheduler                          # the repository's entry)
        entrypoint: /workspace/app
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpucatalog.clusters.sim import binversion
from gpucatalog.core import errors, yamlfile

ENV = "GPU_CATALOG_IMAGE_MAP"
# Set by the sim for its own processes (the sim kubelet): the cluster's saved overlay (``save``).
CLUSTER_ENV = "GPU_CATALOG_SIM_IMAGE_MAP"
KIND = "SimImageMapOverlay"
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "images"],
    "properties": {
        **yamlfile.header(KIND),
        "images": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["image", "executable", "entrypoint"],
                "properties": {
                    # a repository (any tag), or a repository and tag (that tag); never a digest
                    "image": {"type": "string", "pattern": "^[a-z0-9][a-z0-9._/-]*(:[0-9]+/[a-z0-9._/-]+)?[a-z0-9]"
                                                           "(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?$"},
                    "executable": {"type": "string", "minLength": 1},
                    "entrypoint": {"type": "string", "pattern": "^/"},
                    "versionArgs": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
                },
            },
        },
    },
}


@dataclass(frozen=True)
class MappedBinary:
    """One image of the overlay: the host executable standing in for the image's entrypoint."""

    image: str
    executable: str  # absolute path
    entrypoint: str  # the image's ENTRYPOINT path, e.g. /workspace/app
    version_args: tuple[str, ...]
    sha256: str
    version: str  # what the executable reports ("unknown" when nothing)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["version_args"] = list(self.version_args)
        return d


def repository_of(image: str) -> str:
    """An overlay entry's repository: ``ghcr.io/x/y:v1`` -> ``ghcr.io/x/y`` (a port stays)."""
    last = image.rsplit("/", 1)[-1]
    return image[: len(image) - len(last)] + last.split(":", 1)[0]


def _parse(path: Path) -> tuple[Path, list[yamlfile.Document], dict[str, Any]]:
    path = path.expanduser()
    if not path.is_file():
        raise errors.NotFoundError(f"image map not found: {path}", field="--image-map",
                                   expected=f"a {KIND} YAML file")
    text = yamlfile.read_text(path)
    doc = yamlfile.parse_documents(text, path)
    return path, doc, yamlfile.parse_one(text, path, SCHEMA)


def check_declared(path: Path, declared: Sequence[str]) -> list[str]:
    """The images of the overlay at ``path`` whose repository ``declared`` (a bundle's
    ``spec.userSuppliedImages``) does not list; schema-checked only, nothing run or hashed."""
    _path, _doc, data = _parse(path)
    return [e["image"] for e in data["images"] if repository_of(e["image"]) not in declared]


def undeclared_error(path: Path, undeclared: Sequence[str], declared: Sequence[str], bundle: str) -> errors.InputError:
    return errors.InputError(
        f"maps {', '.join(undeclared)}, which {bundle} does not declare user-supplied: an image map may stand in "
        f"only for what the user must bring", path=str(path.expanduser()), field="images[].image",
        expected=f"only images of the bundle's spec.userSuppliedImages ({', '.join(declared) or 'none'}), or "
                 "--exploratory (the evidence is then exploratory, never promotable)")


def load(path: Path) -> list[MappedBinary]:
    """The overlay at ``path``, validated (exit 2 naming file and field on any problem)."""
    path, doc, data = _parse(path)
    out: list[MappedBinary] = []
    seen: set[str] = set()
    for i, e in enumerate(data["images"]):
        if e["image"] in seen:
            raise errors.InputError(f"image {e['image']} is mapped twice", path=str(path),
                                    line=doc[0].line_of(["images", i, "image"]), field=f"images[{i}].image")
        seen.add(e["image"])
        line, field = doc[0].line_of(["images", i, "executable"]), f"images[{i}].executable"
        try:
            out.append(_binary(path, e, line, field))
        except OSError as exc:  # a name too long, a loop of links, a file unreadable
            raise errors.InputError(f"executable for {e['image']} cannot be used: {exc.strerror}", path=str(path),
                                    line=line, field=field, expected="an executable file on this host") from exc
    return out


def _binary(path: Path, e: dict[str, Any], line: int | None, field: str) -> MappedBinary:
    exe = Path(e["executable"]).expanduser()
    exe = exe if exe.is_absolute() else (path.parent / exe)
    if not exe.is_file():
        raise errors.NotFoundError(f"executable for {e['image']} not found: {exe}", path=str(path), line=line,
                                   field=field, expected="an executable file on this host")
    if not os.access(exe, os.X_OK):
        raise errors.InputError(f"{exe} (for {e['image']}) is not executable", path=str(path), line=line,
                                field=field, expected="a file with the execute permission (chmod +x)")
    exe = exe.resolve(strict=True)
    version_args = tuple(e.get("versionArgs") or ())
    return MappedBinary(image=e["image"], executable=str(exe), entrypoint=e["entrypoint"],
                        version_args=version_args, sha256=binversion.sha256(exe),
                        version=binversion.reported_version(exe, version_args))


def changed(b: MappedBinary) -> str:
    """Why ``b``'s executable may not run now: '' when its content is what was recorded at load.
    The sim kubelet asks before each start: a file replaced after the cluster started is refused
    instead of running unnoticed under the recorded sha256."""
    try:
        now = binversion.sha256(Path(b.executable))
    except OSError as exc:
        return f"{b.executable} (for {b.image}) cannot be read: {exc.strerror}"
    if now == b.sha256:
        return ""
    return (f"{b.executable} (for {b.image}) changed after the image map was loaded: recorded {b.sha256}, "
            f"now {now}; restart the cluster to run the new file")


def note_refused(log: Path, b: MappedBinary, why: str) -> None:
    """Keep, with the cluster, that ``b`` was refused at a start (``refused`` reads it back)."""
    with log.open("a") as f:
        f.write(json.dumps({"image": b.image, "executable": b.executable, "reason": why}) + "\n")


def refused(log: Path) -> dict[str, list[str]]:
    """Image -> why each refused start was refused (``note_refused``)."""
    out: dict[str, list[str]] = {}
    if log.is_file():
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            out.setdefault(rec["image"], []).append(rec["reason"])
    return out


def evidence_lines(facts: Sequence[dict[str, Any]], how: str = "") -> tuple[list[str], list[str]]:
    """(live, not run) evidence lines of mapped binaries' facts (``mapped_images`` of a provider);
    ``how`` says how the binary ran where that is not a host process (kind: a local image)."""
    live, not_run = [], []
    for m in facts:
        what = f"image {m['image']} -> {m['executable']} ({m['sha256']}, reports {m['version']}, user-supplied){how}"
        if m["live"]:
            live.append(what + ": ran in " + ", ".join(m["ran"]))
        else:
            not_run.append(what + ": mapped, but no pod ran it")
        not_run += [what + f": a start refused: {why}" for why in m["refused"]]
    return live, not_run


def from_env() -> Path | None:
    """The overlay named by ``$GPU_CATALOG_IMAGE_MAP`` (unset or empty: none)."""
    value = os.environ.get(ENV, "").strip()
    return Path(value) if value else None


def save(binaries: list[MappedBinary], path: Path) -> Path:
    """Keep the validated overlay with its facts in a cluster's state folder (``read`` reads it)."""
    doc = {"apiVersion": yamlfile.API_VERSION, "kind": KIND, "images": [b.to_dict() for b in binaries]}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1))
    tmp.replace(path)
    return path


def read(path: Path) -> list[MappedBinary]:
    """What ``save`` wrote (empty when the cluster has no overlay)."""
    if not path.is_file():
        return []
    doc = json.loads(path.read_text())
    return [MappedBinary(**{**b, "version_args": tuple(b["version_args"])}) for b in doc["images"]]
