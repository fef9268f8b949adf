"""Images of what a bundle runs, built here and loaded into a kind cluster's nodes.

No registry is reachable on this project's machines, so an image a bundle names is built from the
pinned source it comes from, under the name the bundle uses, and ``kind load``-ed into every node
(pods then start with ``IfNotPresent`` and never pull). Which names can be built, and from what:

- ``registry.k8s.io/kueue/kueue`` at the toolchain's Kueue release: its manager, built from
  ``sigs.k8s.io/kueue`` at that version, as ``/manager``;
- ``ghcr.io/gpu-catalog/gpu-health``: gpu-health from this checkout on Debian's python3 with the
  Kubernetes client, as ``Dockerfile.gpu-health`` lays it out;
- ``registry.k8s.io/pause:3.10``, the suites' workload image: pause compiled from the pinned
  Kubernetes release's source (pause 3.10.2), tagged with the name the suites use;
- SIMULATED: the DRA driver's images (``registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu``,
  ``nvcr.io/nvidia/k8s-dra-driver-gpu``), at any tag: no GPU or NVML is here, so the image runs
  this checkout's stand-in kubelet plugin (:mod:`.draplugin`) as ``gpu-kubelet-plugin``. Its
  evidence line says it is a stand-in, not the driver;
- SIMULATED: Slinky's operator image (``ghcr.io/slinkyproject/slurm-operator``, any tag), which
  no machine here can build: a stand-in answering its health probes (:mod:`.slinkystandin`);
  the kind provider starts the Slurm pods from the CRs in its place;
- SIMULATED: KAI's resource-reservation image (any tag), which reads its GPU from NVML: pause
  under its name, the GPU written on its pod by the kind GPU agent (:mod:`.gpuagent`), whose own
  image (``gpu-catalog.local/sim-gpu-agent``) is built from this checkout;
- ``gpu-catalog.local/slurm``: Debian's Slurm 22.05 daemons, munge and MariaDB, with this
  checkout's ``clusters`` and ``core`` packages, which start them (:mod:`.slurmpod`); the Slurm
  pods of the ``slurm`` bundle run it (:mod:`.slurm`), and its gpu-health image then carries
  Debian's Slurm client too (its controller's hook calls ``scontrol``);
- a user's binary from an image-map overlay (KAI's, which nothing here builds), under the name
  the bundle gives it, on the Debian root (the binaries are linked against its C library), as
  distroless's nonroot user 65532; the evidence names the file and its sha256, and says it is
  the user's.

Each built image's ID and source go into the evidence. An image no builder knows is left alone:
on a machine without a registry its pods stay in ``ImagePullBackOff`` and the install's readiness
gate names them.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gpucatalog
from gpucatalog.clusters.kind import imagearchive, nodeimage
from gpucatalog.clusters.sim import imagemap
from gpucatalog.core import cachedir, errors, executor
from gpucatalog.toolchain import build

Progress = Callable[[str], None]
PAUSE_REF = "registry.k8s.io/pause:3.10"
SITE = "opt/gpu-catalog/site"  # the Python packages of an image, from PyPI at the versions this .venv runs
PY_PACKAGES = ("kubernetes", "PyYAML")
DRA_PY_PACKAGES = (*PY_PACKAGES, "grpcio")
SIMULATED = "SIMULATED"  # how a stand-in image's source begins
USER_SUPPLIED = "user-supplied"  # how the source of an image built from a user's binary begins
NONROOT = "65532:65532"  # distroless's nonroot user
# Debian's Slurm (the sim runs the same packages on the host), its munge and accounting database
SLURM_PACKAGES = ("python3", "procps", "munge", "slurm-client", "slurmctld", "slurmd", "slurmdbd",
                  "slurm-wlm-mysql-plugin", "mariadb-server")


@dataclass(frozen=True)
class Built:
    """One image built here: what it is named, its ID, what it was built from."""

    ref: str
    image_id: str
    source: str

    @property
    def simulated(self) -> bool:
        """A stand-in for what the name promises, not a build of it (the DRA driver's images)."""
        return self.source.startswith(SIMULATED)

    @property
    def user_supplied(self) -> bool:
        """Built from a binary the user mapped (the evidence's image-map lines describe it)."""
        return self.source.startswith(USER_SUPPLIED)

    def line(self) -> str:
        return f"image {self.ref} built locally from {self.source} ({self.image_id[:19]})"


def split_ref(ref: str) -> tuple[str, str]:
    """(repository, tag) of ``ref``; a digest-pinned or untagged reference cannot be built here."""
    if "@" in ref:
        raise errors.InputError(f"image {ref!r} is pinned by digest: an image built here cannot match it",
                                field="image", expected="a tag, or a registry this machine reaches")
    repo, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        return ref, "latest"
    return repo, tag


def images_of(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every container image of the pod templates among ``objects``, in order, once each, and the
    images an operator's custom resource names as ``{repository, name, tag}`` (KAI's Config: its
    operator makes the pods)."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            parts = [node.get(k) for k in ("repository", "name", "tag")]
            if all(isinstance(p, str) and p for p in parts):
                ref = f"{parts[0]}/{parts[1]}:{parts[2]}"
                if ref not in found:
                    found.append(ref)
            for key in ("containers", "initContainers"):
                for c in node.get(key) or []:
                    if isinstance(c, dict) and isinstance(c.get("image"), str) and c["image"] not in found:
                        found.append(c["image"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for obj in objects:
        walk(obj)
    return found


def _python_site(work: Path, say: Progress, packages: Sequence[str] = PY_PACKAGES) -> Path:
    """A layer of the Python ``packages`` an image needs, at the versions this environment runs."""
    pins = [f"{p}=={importlib.metadata.version(p)}" for p in packages]
    key = hashlib.sha256(" ".join(pins).encode()).hexdigest()[:12]
    layer = nodeimage.state_dir() / f"python-site-{key}.tar"
    if layer.is_file():
        return layer
    with cachedir.building(layer) as needed:
        if needed:
            target = work / f"site-{key}"
            say(f"pip install --target ({', '.join(pins)})")
            executor.run([sys.executable, "-m", "pip", "install", "-q", "--no-compile", "--target", target, *pins],
                         timeout=600)
            files = {f"{SITE}/{p.relative_to(target)}": p for p in sorted(target.rglob("*"))
                     if p.is_file() and "__pycache__" not in p.parts}
            imagearchive.write_layer(layer, files)
    return layer


def _package_files(prefix: str, subpackages: Sequence[str]) -> dict[str, Path]:
    """This checkout's ``gpucatalog/__init__.py`` and the named subpackages, under ``prefix``."""
    root = Path(gpucatalog.__file__).parent
    files = {f"{prefix}/gpucatalog/__init__.py": root / "__init__.py"}
    for sub in subpackages:
        for p in sorted((root / sub).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                files[f"{prefix}/gpucatalog/{p.relative_to(root)}"] = p
    return files


def _pause(ref: str, work: Path, basics: Path) -> tuple[imagearchive.Image, str]:
    layer = imagearchive.write_layer(work / "pause.tar", {"pause": nodeimage.pause_binary()})
    src = (f"k8s.io/kubernetes@{build.group_of('kubelet').version} build/pause/linux/pause.c "
           f"(pause {nodeimage.PAUSE_VERSION})")
    return imagearchive.Image(ref, (basics, layer), entrypoint=("/pause",), labels={"dev.gpu-catalog.source": src}), src


def _kueue(ref: str, work: Path, basics: Path) -> tuple[imagearchive.Image, str]:
    version = build.group_of("kueue").version
    _repo, tag = split_ref(ref)
    if tag != version:
        raise errors.InputError(f"image {ref} names Kueue {tag}; this toolchain builds Kueue {version}",
                                field="image", expected=f"{KUEUE_REPO}:{version}")
    layer = imagearchive.write_layer(work / "kueue.tar", {"manager": build.ensure("kueue")})
    src = f"sigs.k8s.io/kueue@{version} cmd/kueue"
    return imagearchive.Image(ref, (basics, layer), entrypoint=("/manager",), labels={"dev.gpu-catalog.source": src}), src


def _gpu_health(ref: str, work: Path, say: Progress, slurm_client: bool) -> tuple[imagearchive.Image, str]:
    app = imagearchive.write_layer(work / "gpu-health.tar", _package_files("opt/gpu-health", ["gpuhealth"]))
    src = f"gpu-catalog {importlib.metadata.version('gpu-catalog')} gpucatalog/gpuhealth (this checkout), Debian {nodeimage.SUITE} python3"
    if slurm_client:
        src += " and Slurm 22.05 (its scontrol, for the controller's Slurm hook)"
    env = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE=1",
           "PYTHONUNBUFFERED=1", f"PYTHONPATH=/opt/gpu-health:/{SITE}")
    base = nodeimage.rootfs(say, SLURM_PACKAGES) if slurm_client else nodeimage.rootfs(say)
    image = imagearchive.Image(ref, (base, _python_site(work, say), app),
                               entrypoint=("python3", "-m", "gpucatalog.gpuhealth.main"), cmd=("--help",), env=env,
                               labels={"dev.gpu-catalog.source": src})
    return image, src


def _stand_in_layers(work: Path, say: Progress) -> tuple[Path, ...]:
    """Debian's python3, the Kubernetes client and grpcio, and this checkout's ``clusters`` and
    ``core`` packages, with ``gpu-kubelet-plugin``: what the stand-ins built here run."""
    app = work / "stand-ins.tar"
    if not app.is_file():
        files: dict[str, Path | bytes] = dict(_package_files("opt/gpu-catalog", ["clusters", "core"]))
        # the command both DRA driver charts run; the stand-in takes the same flags and environment
        files["usr/local/bin/gpu-kubelet-plugin"] = work / "gpu-kubelet-plugin"
        (work / "gpu-kubelet-plugin").write_text('#!/bin/sh\nexec python3 -m gpucatalog.clusters.kind.draplugin "$@"\n')
        (work / "gpu-kubelet-plugin").chmod(0o755)
        imagearchive.write_layer(app, files)
    return nodeimage.rootfs(say), _python_site(work, say, DRA_PY_PACKAGES), app


_STAND_IN_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE=1",
                 "PYTHONUNBUFFERED=1", f"PYTHONPATH=/opt/gpu-catalog:/{SITE}")


def _dra_stand_in(ref: str, work: Path, say: Progress) -> tuple[imagearchive.Image, str]:
    src = (f"{SIMULATED} stand-in for the DRA driver's kubelet plugin: gpu-catalog "
           f"{importlib.metadata.version('gpu-catalog')} gpucatalog/clusters/kind/draplugin.py (this checkout), "
           f"Debian {nodeimage.SUITE} python3")
    image = imagearchive.Image(ref, _stand_in_layers(work, say), entrypoint=("gpu-kubelet-plugin",),
                               env=_STAND_IN_ENV, labels={"dev.gpu-catalog.source": src})
    return image, src


def _gpu_agent(ref: str, work: Path, say: Progress) -> tuple[imagearchive.Image, str]:
    src = (f"{SIMULATED} GPU agent of kind's GPU workers: gpu-catalog {importlib.metadata.version('gpu-catalog')} "
           f"gpucatalog/clusters/kind/gpuagent.py (this checkout), Debian {nodeimage.SUITE} python3")
    image = imagearchive.Image(ref, _stand_in_layers(work, say), entrypoint=("python3", "-m", "gpucatalog.clusters.kind.gpuagent"),
                               env=_STAND_IN_ENV, labels={"dev.gpu-catalog.source": src})
    return image, src


def _slurm(ref: str, work: Path, say: Progress) -> tuple[imagearchive.Image, str]:
    app = imagearchive.write_layer(work / "slurm-app.tar", _package_files("opt/gpu-catalog", ["clusters", "core"]))
    src = (f"Debian {nodeimage.SUITE} {', '.join(SLURM_PACKAGES)}; gpu-catalog {importlib.metadata.version('gpu-catalog')} "
           "gpucatalog/clusters/kind/slurmpod.py (this checkout) starting them")
    image = imagearchive.Image(ref, (nodeimage.rootfs(say, SLURM_PACKAGES), _python_site(work, say), app),
                               entrypoint=("python3", "-m", "gpucatalog.clusters.kind.slurmpod"), env=_STAND_IN_ENV,
                               labels={"dev.gpu-catalog.source": src})
    return image, src


def _operator_stand_in(ref: str, work: Path, say: Progress) -> tuple[imagearchive.Image, str]:
    src = (f"{SIMULATED} stand-in for Slinky's slurm-operator (the module proxy refuses it): gpu-catalog "
           f"{importlib.metadata.version('gpu-catalog')} gpucatalog/clusters/kind/slinkystandin.py (this checkout) "
           "answering its health probes; the kind provider starts the Slurm pods from the CRs")
    # the operator's pod asks runAsNonRoot, as its distroless image allows
    image = imagearchive.Image(ref, _stand_in_layers(work, say), entrypoint=("python3", "-m", "gpucatalog.clusters.kind.slinkystandin"),
                               env=_STAND_IN_ENV, labels={"dev.gpu-catalog.source": src}, user=NONROOT)
    return image, src


def _reservation_stand_in(ref: str, work: Path, basics: Path) -> tuple[imagearchive.Image, str]:
    image, _src = _pause(ref, work, basics)
    src = (f"{SIMULATED} stand-in for KAI's resource-reservation binary (it reads its GPU from NVML): pause "
           f"{nodeimage.PAUSE_VERSION}; the GPU is written on the pod by the SIMULATED GPU agent")
    return imagearchive.Image(ref, image.layers, entrypoint=image.entrypoint, labels={"dev.gpu-catalog.source": src}), src


def _user_binary(ref: str, b: imagemap.MappedBinary, work: Path, say: Progress) -> tuple[imagearchive.Image, str]:
    why = imagemap.changed(b)
    if why:
        raise errors.InputError(why, field="--image-map", expected="the file as it was when the image map was loaded")
    digest = hashlib.sha256(ref.encode()).hexdigest()[:12]
    layer = imagearchive.write_layer(work / f"user-{digest}.tar", {b.entrypoint.lstrip("/"): Path(b.executable)})
    src = f"{USER_SUPPLIED} executable {b.executable} ({b.sha256}, reports {b.version}) as {b.entrypoint}, on Debian {nodeimage.SUITE}"
    # as the distroless images such binaries ship in run: the nonroot user, which pods that ask
    # for runAsNonRoot (KAI's do) need the image to name
    image = imagearchive.Image(ref, (nodeimage.rootfs(say), layer), entrypoint=(b.entrypoint,),
                               labels={"dev.gpu-catalog.source": src}, user=NONROOT)
    return image, src


KUEUE_REPO = "registry.k8s.io/kueue/kueue"
GPU_HEALTH_REPO = "ghcr.io/gpu-catalog/gpu-health"
DRA_REPOS = ("registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu", "nvcr.io/nvidia/k8s-dra-driver-gpu")
RESERVATION_REPO = "ghcr.io/kai-scheduler/kai-scheduler/resourcereservation"
GPU_AGENT_REPO = nodeimage.REGISTRY + "/sim-gpu-agent"
SLURM_REPO = nodeimage.REGISTRY + "/slurm"
SLINKY_OPERATOR_REPO = "ghcr.io/slinkyproject/slurm-operator"


def gpu_agent_ref() -> str:
    return f"{GPU_AGENT_REPO}:{importlib.metadata.version('gpu-catalog')}"


def slurm_ref() -> str:
    return f"{SLURM_REPO}:{importlib.metadata.version('gpu-catalog')}"


def buildable(ref: str) -> bool:
    return ref == PAUSE_REF or ("@" not in ref and split_ref(ref)[0] in (
        KUEUE_REPO, GPU_HEALTH_REPO, *DRA_REPOS, RESERVATION_REPO, GPU_AGENT_REPO, SLURM_REPO, SLINKY_OPERATOR_REPO))


def mapped_refs(refs: Sequence[str], binaries: Sequence[imagemap.MappedBinary]) -> dict[str, imagemap.MappedBinary]:
    """Which of ``refs`` an overlay's binaries serve: an entry naming a tag serves that reference,
    one naming a repository serves every tag of it (as on the sim)."""
    out: dict[str, imagemap.MappedBinary] = {}
    for ref in refs:
        exact = [b for b in binaries if b.image == ref]
        by_repo = [b for b in binaries if b.image == imagemap.repository_of(b.image) == imagemap.repository_of(ref)]
        if exact or by_repo:
            out[ref] = (exact or by_repo)[0]
    return out


def build_archive(refs: Sequence[str], dest: Path, say: Progress,
                  mapped: Mapping[str, imagemap.MappedBinary] | None = None) -> list[Built]:
    """Build the images ``refs`` (each :func:`buildable`, or served by a user's binary in
    ``mapped``) into one archive at ``dest``. With the Slurm image among them, gpu-health's
    carries Slurm's client."""
    slurm_client = any(split_ref(r)[0] == SLURM_REPO for r in refs if "@" not in r)
    mapped = mapped or {}
    with tempfile.TemporaryDirectory(dir=nodeimage.state_dir(), prefix="images-") as tmp:
        work = Path(tmp)
        basics = nodeimage.basics_layer(work)
        made: list[tuple[imagearchive.Image, str]] = []
        for ref in refs:
            if ref in mapped:
                made.append(_user_binary(ref, mapped[ref], work, say))
                continue
            if not buildable(ref):
                raise errors.InputError(f"no way to build image {ref} here", field="image")
            repo, _tag = split_ref(ref)
            if ref == PAUSE_REF:
                made.append(_pause(ref, work, basics))
            elif repo == KUEUE_REPO:
                made.append(_kueue(ref, work, basics))
            elif repo in DRA_REPOS:
                made.append(_dra_stand_in(ref, work, say))
            elif repo == RESERVATION_REPO:
                made.append(_reservation_stand_in(ref, work, basics))
            elif repo == GPU_AGENT_REPO:
                made.append(_gpu_agent(ref, work, say))
            elif repo == SLURM_REPO:
                made.append(_slurm(ref, work, say))
            elif repo == SLINKY_OPERATOR_REPO:
                made.append(_operator_stand_in(ref, work, say))
            else:
                made.append(_gpu_health(ref, work, say, slurm_client))
        ids = imagearchive.write_archive([m[0] for m in made], dest)
    return [Built(img.ref, ids[img.ref], src) for img, src in made]


def load(kind_bin: Path, cluster: str, refs: Sequence[str], env: dict[str, str], state: Path,
         say: Progress, mapped: Mapping[str, imagemap.MappedBinary] | None = None) -> list[Built]:
    """Build ``refs`` and load them into every node of kind cluster ``cluster``."""
    if not refs:
        return []
    archive = state / "images.tar"
    built = build_archive(refs, archive, say, mapped)
    say(f"kind load image-archive: {', '.join(refs)}")
    executor.run([kind_bin, "load", "image-archive", archive, "--name", cluster], env=env, timeout=900)
    archive.unlink(missing_ok=True)
    (state / "images.json").write_text(json.dumps([b.__dict__ for b in built], indent=1) + "\n")
    return built
