"""The sim kubelet's image map: which images run as real processes. The shipped map
(``data/images.yaml``: the project's own programs) with a cluster's image-map overlay
(:mod:`.imagemap`: bring-your-own binaries) merged over it, an overlay entry replacing a shipped
one for the same image.

Used by the sim kubelet (to build a container's argv; its map is the cluster's, named by
``$GPU_CATALOG_SIM_IMAGE_MAP``), by ``stages`` (to tell kwok, through a jq selector, to leave
those pods alone), by ``parts`` (what ran live) and by ``SimCluster.start_services`` (to build the
toolchain binaries a bundle's images run as). An entry names a repository (any tag matches) or
a repository and tag (that tag only, before any repository entry: two releases of a program on one
cluster, as an upgrade runs them); a digest is ignored. In the shipped map, an argv element
``@<tool>`` stands for the pinned toolchain binary ``<tool>``.

After the map come the common base images (``data/base-images.yaml``: busybox, alpine, debian,
ubuntu, python), matched by :func:`base_name` and run with the container's own command on a root
file system the sim builds (:mod:`.rootfs`); a pod of only such images whose end a test scripts
with an annotation (:data:`SCRIPTED`) stays kwok's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpucatalog.clusters.sim import imagemap, rootfs
from gpucatalog.core import errors
from gpucatalog.toolchain import build

TOOL_PREFIX = "@"
Table = Mapping[str, "ImageEntry"]


@dataclass(frozen=True)
class ImageEntry:
    image: str
    entrypoint: tuple[str, ...]
    commands: dict[str, tuple[str, ...]]
    executable: str = ""  # the host executable of an overlay entry ('' for the shipped programs)
    # what a sim-only program stands in for ('' when the image's own program runs): evidence
    # lists such pods as simulated, never as live
    stand_in: str = ""
    # an overlay entry's recorded binary (sha256 at load), checked again before each start
    binary: imagemap.MappedBinary | None = None
    # a base image (base-images.yaml): the root file system it runs on ('busybox', 'host'), and
    # its CMD; any command of the container runs as given, looked up in that root
    rootfs: str = ""
    cmd: tuple[str, ...] = ()

    @property
    def base(self) -> bool:
        return bool(self.rootfs)


# annotations by which a test scripts a kwok pod's end (kwok-stages.yaml, stage sim-pod-complete)
SCRIPTED = ("sim.gpu-catalog.dev/complete", "sim.gpu-catalog.dev/run-for", "sim.gpu-catalog.dev/exit-code")


def repository(ref: str) -> str:
    """Image reference without tag or digest: ``ghcr.io/x/y:1.2@sha256:…`` -> ``ghcr.io/x/y``."""
    ref = ref.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref = ref[: len(ref) - len(last)] + last.split(":", 1)[0]
    return ref


def tagged(ref: str) -> str:
    """Image reference without digest: ``ghcr.io/x/y:1.2@sha256:…`` -> ``ghcr.io/x/y:1.2``."""
    return ref.split("@", 1)[0]


@cache
def shipped() -> dict[str, ImageEntry]:
    text = resources.files("gpucatalog.clusters.sim").joinpath("data/images.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    out: dict[str, ImageEntry] = {}
    for e in doc["images"]:
        out[e["image"]] = ImageEntry(
            image=e["image"],
            entrypoint=tuple(e["entrypoint"]),
            commands={k: tuple(v) for k, v in (e.get("commands") or {}).items()},
            stand_in=str(e.get("standIn") or ""),
        )
    return out


def base_name(ref: str) -> str:
    """An image reference's repository without registry host, tag, digest or a leading
    ``library/``: ``<host>:5000/library/busybox:1.36@sha256:…`` -> ``busybox``."""
    parts = repository(ref).split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    if len(parts) > 1 and parts[0] == "library":
        parts = parts[1:]
    return "/".join(parts)


@cache
def _base_table() -> tuple[ImageEntry, ...]:
    """Every row of data/base-images.yaml, whether or not its root can be built here."""
    text = resources.files("gpucatalog.clusters.sim").joinpath("data/base-images.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    for e in doc["images"]:
        if e["rootfs"] not in rootfs.KINDS:
            raise errors.InputError(f"base image {e['name']}: unknown rootfs {e['rootfs']!r}", expected=", ".join(rootfs.KINDS))
    return tuple(ImageEntry(image=e["name"], entrypoint=tuple(e.get("entrypoint") or ()), commands={},
                            rootfs=e["rootfs"], cmd=tuple(e.get("cmd") or ())) for e in doc["images"])


@cache
def base_images() -> dict[str, ImageEntry]:
    """The base images this host can run (an entry whose root cannot be built here is left out,
    so its pods stay kwok's and are recorded as simulated). Asked once per process, and again
    after ``refresh_base_images``: lookups of every pod on every kubelet poll come here."""
    return {e.image: e for e in _base_table() if rootfs.available(e.rootfs)}


def refresh_base_images() -> None:
    """Ask again which roots this host can build: a cluster starting in a long-lived process (a
    test worker that asked before agnhost was built) writes kwok's selector from the answer."""
    base_images.cache_clear()


def scripted(annotations: Mapping[str, str] | None) -> bool:
    """Whether a test scripts the pod's end (kwok then runs it, whatever its images)."""
    return any(k in (annotations or {}) for k in SCRIPTED)


def sim_runs(image_refs: Sequence[str], annotations: Mapping[str, str] | None, table: Table | None = None) -> bool:
    """Whether the sim kubelet runs a pod of these container images (kwok_exclusion_jq's rule):
    one image of the map, or one base image and no scripted end."""
    t = image_map() if table is None else table
    if any(t.get(tagged(r)) or t.get(repository(r)) for r in image_refs):
        return True
    return not scripted(annotations) and any(base_name(r) in base_images() for r in image_refs)


def entry_of(b: imagemap.MappedBinary) -> ImageEntry:
    """An overlay entry: the executable stands in for the image's entrypoint program, whether a
    container leaves ``command`` unset or names that program (by path or file name)."""
    program = (b.executable,)
    return ImageEntry(image=b.image, entrypoint=program, executable=b.executable, binary=b,
                      commands={b.entrypoint: program, b.entrypoint.rsplit("/", 1)[-1]: program})


def merged(binaries: Sequence[imagemap.MappedBinary]) -> dict[str, ImageEntry]:
    """The shipped map with ``binaries`` over it."""
    return {**shipped(), **{b.image: entry_of(b) for b in binaries}}


@cache
def _cluster_map(saved: str) -> dict[str, ImageEntry]:
    return merged(imagemap.read(Path(saved)) if saved else [])


def image_map() -> dict[str, ImageEntry]:
    """This process's map: the shipped one, plus the overlay the sim handed its own processes."""
    return _cluster_map(os.environ.get(imagemap.CLUSTER_ENV, ""))


def lookup(ref: str, table: Table | None = None) -> ImageEntry | None:
    """The entry for ``ref``: its repository and tag's, else its repository's."""
    t = image_map() if table is None else table
    return t.get(tagged(ref)) or t.get(repository(ref)) or base_images().get(base_name(ref))


def changed(ref: str, table: Table | None = None) -> tuple[imagemap.MappedBinary | None, str]:
    """For an image served by an overlay entry: its binary, and why it may not start ('' when its
    executable is still the file recorded at load)."""
    entry = lookup(ref, table)
    if entry is None or entry.binary is None:
        return None, ""
    return entry.binary, imagemap.changed(entry.binary)


def argv_for(container: dict[str, Any], table: Table | None = None) -> list[str]:
    """Host argv for a container of a mapped image (Kubernetes command/args semantics)."""
    entry = lookup(str(container.get("image", "")), table)
    if entry is None:
        raise errors.NotFoundError(f"image {container.get('image')!r} is not in the sim image map")
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    if entry.base:  # Kubernetes' rule over the image's ENTRYPOINT and CMD; looked up in its root
        if command:
            return [*command, *args]
        return [*entry.entrypoint, *(args or entry.cmd)]
    if not command:
        return [*_tools(entry.entrypoint, entry), *args]
    prefix = entry.commands.get(command[0]) or entry.commands.get(command[0].rsplit("/", 1)[-1])
    if prefix is None:
        raise errors.NotFoundError(
            f"executable {command[0]!r} not found in image {entry.image}", expected=", ".join(entry.commands)
        )
    return [*_tools(prefix, entry), *command[1:], *args]


def _tools(prefix: tuple[str, ...] | list[str], entry: ImageEntry) -> list[str]:
    """``prefix`` with each ``@tool`` replaced by the cached toolchain binary (never built here:
    the kubelet must not stall for a build; ``start_services`` builds them before install)."""
    out = []
    for part in prefix:
        if part.startswith(TOOL_PREFIX):
            tool = part[len(TOOL_PREFIX):]
            path = build.cached(tool)
            if path is None:
                raise errors.NotFoundError(
                    f"image {entry.image} runs as toolchain binary {tool!r}, which is not built",
                    expected="`catalog toolchain ensure` (or a certification run, which builds it first)")
            part = str(path)
        out.append(part)
    return out


def pod_images(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """Container images of the pods and pod templates among rendered ``objects``."""
    refs: set[str] = set()
    for obj in objects:
        spec = obj.get("spec") or {}
        pod = spec if obj.get("kind") == "Pod" else ((spec.get("template") or {}).get("spec") or {})
        if obj.get("kind") == "CronJob":
            pod = (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
            if c.get("image"):
                refs.add(str(c["image"]))
    return sorted(refs)


def tools_for(image_refs: Iterable[str], table: Table | None = None) -> list[str]:
    """The toolchain binaries the mapped images among ``image_refs`` run as."""
    tools: set[str] = set()
    for ref in image_refs:
        entry = lookup(ref, table)
        if entry is None:
            continue
        for argv in (entry.entrypoint, *entry.commands.values()):
            tools.update(p[len(TOOL_PREFIX):] for p in argv if p.startswith(TOOL_PREFIX))
    return sorted(tools)


def kwok_exclusion_jq(table: Table | None = None) -> str:
    """jq expression true for the pods the sim kubelet runs (:func:`sim_runs`): at least one
    container of a mapped image (an entry matches a reference's repository, or its repository and
    tag), or of a base image (:func:`base_name`) when no annotation scripts the pod's end."""
    keys = json.dumps(sorted(image_map() if table is None else table))
    bases = json.dumps(sorted(base_images()))
    refs = "[(.spec.containers // [])[] | .image | sub(\"@.*$\"; \"\")]"
    mapped = (f"{keys} as $sim | {refs} | any(.[]; . as $ref | sub(\":[^:/]*$\"; \"\") as $repo "
              "| any($sim[]; . == $ref or . == $repo))")
    # base_name: drop tag, a registry host (a first part with '.' or ':', or localhost), library/
    base = (f"{bases} as $base | {refs} | any(.[]; sub(\":[^:/]*$\"; \"\") | split(\"/\") "
            "| (if length > 1 and ((.[0] | test(\"[.:]\")) or .[0] == \"localhost\") then .[1:] else . end) "
            "| (if length > 1 and .[0] == \"library\" then .[1:] else . end) | join(\"/\") as $n "
            "| any($base[]; . == $n))")
    scripted_ = f"((.metadata.annotations // {{}}) as $a | {json.dumps(list(SCRIPTED))} | any(.[]; . as $k | $a | has($k)))"
    return f"({mapped}) or (({base}) and ({scripted_} | not))"
