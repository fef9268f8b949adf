"""Container images written as ``docker save`` archives, without a Docker build.

The kind node image carries the control plane, CoreDNS and pause as images in its containerd
store, and gpu-catalog loads the images its bundles run into kind nodes; no registry is
reachable here, so each is assembled from files built from pinned sources. An archive holds
uncompressed layer tars, a config and ``manifest.json``, the format ``docker load`` and ``ctr
images import`` both read. Layers are written with sorted names, owner 0 and time 0, so the same
inputs give the same image ID (the config's sha256) on every machine.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpucatalog.core import errors
from gpucatalog.toolchain import build


@dataclass(frozen=True)
class Image:
    """One image: its reference, layer tars bottom first, and how it starts."""

    ref: str
    layers: tuple[Path, ...]
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    labels: Mapping[str, str] = field(default_factory=dict)
    user: str = ""  # the image's USER ("uid:gid"); empty: root


def _info(name: str, *, mode: int, kind: bytes = tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.size, ti.linkname = kind, mode, size, link
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    ti.mtime = 0
    return ti


def write_layer(dest: Path, files: Mapping[str, Path | bytes], *, links: Mapping[str, str] | None = None,
                dirs: Iterable[str] = ()) -> Path:
    """A layer tar at ``dest``: ``files`` maps a path in the image (no leading slash) to a host file
    (mode kept) or bytes (mode 0644); ``links`` maps a path to a symlink target; ``dirs`` are empty
    directories. Parent directories are added, mode 0755."""
    entries: dict[str, tuple[tarfile.TarInfo, bytes | Path | None]] = {}

    def parents(name: str) -> None:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            entries.setdefault(d, (_info(d, mode=0o755, kind=tarfile.DIRTYPE), None))

    for name, src in files.items():
        name = name.strip("/")
        parents(name)
        if isinstance(src, bytes):
            entries[name] = (_info(name, mode=0o644, size=len(src)), src)
        else:
            st = src.stat()
            entries[name] = (_info(name, mode=st.st_mode & 0o7777, size=st.st_size), src)
    for name, target in (links or {}).items():
        name = name.strip("/")
        parents(name)
        entries[name] = (_info(name, mode=0o777, kind=tarfile.SYMTYPE, link=target), None)
    for d in dirs:
        d = d.strip("/")
        parents(d + "/x")
        entries[d] = (_info(d, mode=0o1777 if d == "tmp" else 0o755, kind=tarfile.DIRTYPE), None)
    tmp = dest.with_name(dest.name + ".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            ti, data = entries[name]
            if isinstance(data, bytes):
                tar.addfile(ti, io.BytesIO(data))
            elif isinstance(data, Path):
                with data.open("rb") as f:
                    tar.addfile(ti, f)
            else:
                tar.addfile(ti)
    os.replace(tmp, dest)
    return dest


def _config(img: Image, diff_ids: list[str]) -> bytes:
    cfg: dict[str, object] = {"Env": list(img.env), "WorkingDir": "/"}
    if img.entrypoint:
        cfg["Entrypoint"] = list(img.entrypoint)
    if img.cmd:
        cfg["Cmd"] = list(img.cmd)
    if img.labels:
        cfg["Labels"] = dict(sorted(img.labels.items()))
    if img.user:
        cfg["User"] = img.user
    doc = {"architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z", "config": cfg,
           "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in diff_ids]},
           "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "gpu-catalog imagearchive"}
                       for _ in diff_ids]}
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def write_archive(images: Iterable[Image], dest: Path) -> dict[str, str]:
    """Write ``images`` into one archive at ``dest`` (a layer two images share is stored once);
    returns each reference's image ID (``sha256:`` of its config)."""
    images = list(images)
    if not images:
        raise errors.InputError("no images to write", field="images")
    digests: dict[Path, str] = {}
    written: set[str] = set()
    manifest: list[dict[str, object]] = []
    ids: dict[str, str] = {}
    tmp = dest.with_name(dest.name + ".partial")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for img in images:
            if ":" not in img.ref.rsplit("/", 1)[-1]:
                raise errors.InputError(f"image reference {img.ref!r} has no tag", field="ref")
            diff_ids = []
            for layer in img.layers:
                if layer not in digests:
                    digests[layer] = build.sha256_file(layer)
                if digests[layer] not in written:
                    written.add(digests[layer])
                    ti = _info(f"{digests[layer]}/layer.tar", mode=0o644, size=layer.stat().st_size)
                    with layer.open("rb") as f:
                        tar.addfile(ti, f)
                diff_ids.append(digests[layer])
            config = _config(img, diff_ids)
            cid = hashlib.sha256(config).hexdigest()
            tar.addfile(_info(f"{cid}.json", mode=0o644, size=len(config)), io.BytesIO(config))
            manifest.append({"Config": f"{cid}.json", "RepoTags": [img.ref],
                             "Layers": [f"{d}/layer.tar" for d in diff_ids]})
            ids[img.ref] = f"sha256:{cid}"
        data = json.dumps(manifest, sort_keys=True).encode()
        tar.addfile(_info("manifest.json", mode=0o644, size=len(data)), io.BytesIO(data))
    os.replace(tmp, dest)
    return ids
