"""The kind node image, built here from pinned sources (no registry is reachable to pull one).

What kind's own ``kindest/node`` holds, from the same kind of sources:

- a Debian root file system (``debootstrap`` of the packages kind's base image installs, from the
  package mirror this machine's apt uses, read at run time);
- kind's base files (entrypoint, systemd units, containerd config) from the pinned kind module;
- containerd, runc, crictl, the CNI plugins, kubelet, kubeadm and kubectl, and the control
  plane, etcd, CoreDNS and pause as images in containerd's store, all built from the toolchain's
  pinned modules (pause from Kubernetes' own ``build/pause/linux/pause.c``).

Images built here are named under :data:`REGISTRY`, a name no registry answers to, and kubeadm is
told so (``imageRepository``), so nothing claims to be an upstream image it is not. The result is
cached by the digest of every input (``$GPU_CATALOG_CACHE/kind-node/<tag>.lock.json`` lists them)
and is rebuilt only when one changes.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpucatalog.clusters.kind import capfilter, config, engine, imagearchive
from gpucatalog.core import cachedir, errors, executor
from gpucatalog.toolchain import build

Progress = Callable[[str], None]

REGISTRY = "gpu-catalog.local"
SUITE = "bookworm"
# The packages kind v0.33.0's base image installs (images/base/Dockerfile), less what serves only
# rootless or storage tests (fuse-overlayfs, nfs-common, open-iscsi), and with python3 for the
# runtime wrapper (capfilter.py) that containerd runs in place of runc.
PACKAGES = ("systemd", "conntrack", "iptables", "nftables", "iproute2", "ethtool", "util-linux", "mount",
            "kmod", "libseccomp2", "pigz", "e2fsprogs", "bash", "ca-certificates", "curl", "jq", "procps",
            "python3")
PAUSE_VERSION = "3.10.2"  # kubeadm v1.36.3's constants.PauseVersion
# Bumped when the way the image is put together changes, so a cached image is not reused.
RECIPE = "1"
CAPFILTER = "/usr/local/sbin/runc-capfilter"

NODE_TOOLS = ("kubelet", "kubeadm", "kubectl")
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
RUNTIME_TOOLS = ("containerd", "ctr", "containerd-shim-runc-v2", "runc", "crictl")
CNI_PLUGINS = ("host-local", "loopback", "ptp", "portmap")


def _quiet(_msg: str) -> None:
    return None


def state_dir() -> Path:
    return build.cache_root() / "kind-node"


def apt_mirror(sources: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt reads ``main`` from (deb822 ``.sources`` first, then
    one-line ``sources.list``). Read at run time so no host name is written into the project."""
    files = sorted((sources / "sources.list.d").glob("*.sources")) if (sources / "sources.list.d").is_dir() else []
    for f in files:
        for stanza in f.read_text().split("\n\n"):
            fields = dict(ln.split(":", 1) for ln in stanza.splitlines() if ":" in ln and not ln.startswith("#"))
            uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
            if uris and SUITE in suites and "security" not in uris[0]:
                return uris[0]
    listing = sources / "sources.list"
    if listing.is_file():
        for ln in listing.read_text().splitlines():
            ln = re.sub(r"\[[^]]*\]", "", ln)  # options: deb [arch=amd64] URI SUITE …
            parts = ln.split()
            if len(parts) >= 3 and parts[0] == "deb" and parts[2] == SUITE:
                return parts[1]
    raise errors.InputError(f"apt names no mirror for Debian {SUITE} main", field=str(sources),
                            expected=f"a source with Suites: {SUITE} (the node image's root file system comes from it)")


def rootfs(say: Progress = _quiet, packages: tuple[str, ...] = PACKAGES) -> Path:
    """A Debian root file system with ``packages`` as a tar (cached by suite and package list)."""
    key = hashlib.sha256(f"{SUITE}\n{' '.join(packages)}".encode()).hexdigest()[:12]
    out = state_dir() / f"rootfs-{SUITE}-{key}.tar"
    if out.is_file():
        return out
    mirror = apt_mirror()
    with cachedir.building(out) as needed:
        if not needed:
            return out
        with tempfile.TemporaryDirectory(dir=out.parent, prefix="rootfs-") as tmp:
            tree = Path(tmp) / "root"
            say(f"debootstrap {SUITE} ({len(packages)} packages)")
            started = time.monotonic()
            executor.run(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE, tree, mirror],
                         timeout=1800)
            _tar(tree, out)
            say(f"root file system ready in {time.monotonic() - started:.0f} s")
    return out


def _tar(tree: Path, dest: Path) -> None:
    """``tree`` as a tar with sorted names, numeric owners and time 0 (same input, same bytes);
    the kernel's mount points stay empty."""
    partial = dest.with_name(dest.name + ".partial")
    executor.run(["tar", "--sort=name", "--mtime=@0", "--numeric-owner", "--xattrs", "--one-file-system",
                  "--exclude=./proc/*", "--exclude=./sys/*", "--exclude=./dev/*",
                  "-C", tree, "-cf", partial, "."], timeout=900)
    os.replace(partial, dest)


def pause_binary() -> Path:
    """Kubernetes' pause binary, compiled from the pinned release's source as its Makefile does
    (cached)."""
    out = state_dir() / f"pause-{PAUSE_VERSION}-{build.group_of('kubelet').version}"
    if out.is_file():
        return out
    src = build.module_dir("k8s.io/kubernetes", build.group_of("kubelet").version) / "build/pause/linux/pause.c"
    with cachedir.building(out) as needed:
        if needed:
            partial = out.with_name(out.name + ".partial")
            executor.run(["gcc", "-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{PAUSE_VERSION}", "-o", partial, src])
            os.replace(partial, out)
    return out


def basics_layer(work: Path) -> Path:
    """/etc basics and CA certificates (from the Debian root) under the static binaries' images."""
    certs = work / "ca-certificates.crt"
    executor.run(["tar", "-xf", rootfs(), "-C", work, "--strip-components=4", "./etc/ssl/certs/ca-certificates.crt"])
    return imagearchive.write_layer(work / "basics.tar", {
        "etc/passwd": b"root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n",
        "etc/group": b"root:x:0:\nnobody:x:65534:\n",
        "etc/nsswitch.conf": b"hosts: files dns\n",
        "etc/ssl/certs/ca-certificates.crt": certs,
    }, dirs=("tmp", "root"))


def _tool_paths(say: Progress) -> dict[str, Path]:
    tools = (*NODE_TOOLS, *CONTROL_PLANE, *RUNTIME_TOOLS, *CNI_PLUGINS, "etcd", "coredns")
    return {t: build.ensure(t, say) for t in tools}


def _images(tools: dict[str, Path], base: Path, work: Path) -> list[imagearchive.Image]:
    """The control plane, etcd, CoreDNS and pause as images. kube-proxy runs iptables/nft, so it sits
    on the Debian root; the rest are static binaries on a layer of /etc basics and CA certificates."""
    version = build.group_of("kubelet").version
    basics = basics_layer(work)

    def binary_image(name: str, tag: str, path: Path, lower: Path, entry: str) -> imagearchive.Image:
        layer = imagearchive.write_layer(work / f"{name}.tar", {entry.lstrip("/"): path})
        return imagearchive.Image(ref=f"{REGISTRY}/{name}:{tag}", layers=(lower, layer), entrypoint=(entry,),
                                  labels={"dev.gpu-catalog.source": f"built locally: {name} {tag}"})

    images = [binary_image(t, version, tools[t], base if t == "kube-proxy" else basics, f"/usr/local/bin/{t}")
              for t in CONTROL_PLANE]
    etcd_version = build.group_of("etcd").version.lstrip("v")
    images.append(binary_image("etcd", etcd_version, tools["etcd"], basics, "/usr/local/bin/etcd"))
    images.append(binary_image("coredns", build.group_of("coredns").version, tools["coredns"], basics, "/coredns"))
    images.append(binary_image("pause", PAUSE_VERSION, pause_binary(), basics, "/pause"))
    return images


def _inputs(tools: dict[str, Path], base: Path) -> dict[str, Any]:
    kind = build.group_of("kind")
    return {
        "recipe": RECIPE,
        "capfilterSha256": build.sha256_file(Path(capfilter.__file__)),
        "kind": kind.version,
        "debian": {"suite": SUITE, "packages": list(PACKAGES), "rootfsSha256": build.sha256_file(base)},
        "tools": {t: {"version": build.group_of(t).version, "sha256": build.stamped_sha256(t)}
                  for t in sorted(tools)},
        "pause": {"version": PAUSE_VERSION, "source": f"k8s.io/kubernetes@{build.group_of('kubelet').version}"
                                                      "/build/pause/linux/pause.c"},
    }


def ref_for(inputs: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]
    return f"{REGISTRY}/kind-node:{inputs['tools']['kubelet']['version']}-{digest}"


def _docker(*args: str | os.PathLike[str], timeout: float = 600) -> str:
    return executor.run(["docker", *args], env=engine.env(), timeout=timeout).stdout.strip()


def image_id(ref: str) -> str | None:
    """The local image ID of ``ref``, or None when the engine has no such image."""
    proc = executor.run(["docker", "image", "inspect", "--format", "{{.Id}}", ref], env=engine.env(), check=False,
                        timeout=60)
    return proc.stdout.strip() if proc.returncode == 0 else None


def ensure(say: Progress = _quiet) -> tuple[str, dict[str, Any]]:
    """The node image's reference and its lock (every input's version and digest), building it
    first when the engine does not have it."""
    # debootstrap waits on the mirror while the Go builds use the cores: side by side
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        base_future = pool.submit(rootfs, say)
        tools = _tool_paths(say)
        base = base_future.result()
    inputs = _inputs(tools, base)
    ref = ref_for(inputs)
    lock_path = state_dir() / f"{ref.rsplit(':', 1)[1]}.lock.json"
    if image_id(ref) is not None and lock_path.is_file():
        return ref, json.loads(lock_path.read_text())
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=state_dir(), prefix="node-") as tmp:
        work = Path(tmp)
        images = _images(tools, base, work)
        archive = work / "images.tar"
        ids = imagearchive.write_archive(images, archive)
        tree = work / "root"
        tree.mkdir()
        say("node root: Debian, kind's base files, containerd, runc, kubelet")
        executor.run(["tar", "-xf", base, "-C", tree, "--numeric-owner"], timeout=600)
        _install_base(tree, tools, {i.ref for i in images})
        say(f"preloading {len(images)} images into the node's containerd")
        _preload(tree, tools, archive, work)
        node_tar = work / "node.tar"
        _tar(tree, node_tar)
        say(f"docker import {ref}")
        node_id = _docker("import",
                          "--change", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
                          "--change", "ENV container=docker",
                          node_tar, ref)
    lock = {**inputs, "image": ref, "imageId": node_id, "images": ids,
            "buildSeconds": round(time.monotonic() - started, 1)}
    lock_path.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    say(f"node image {ref} built in {lock['buildSeconds']:.0f} s")
    return ref, lock


def _install(src: Path, dest: Path, mode: int = 0o755) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    dest.chmod(mode)


def _install_base(tree: Path, tools: dict[str, Path], images: set[str]) -> None:
    """What kind's base image Dockerfile does on top of Debian, and its node-image build after it."""
    files = build.module_dir("sigs.k8s.io/kind", build.group_of("kind").version) / "images/base/files"
    for src in sorted(p for p in files.rglob("*") if p.is_file()):
        rel = src.relative_to(files)
        executable = rel.parts[0] == "usr" or rel.parts[:2] == ("kind", "bin")
        _install(src, tree / rel, 0o755 if executable else 0o644)
    systemd = tree / "lib/systemd/system"
    for pattern in ("sysinit.target.wants/systemd-tmpfiles-setup.service", "multi-user.target.wants/*",
                    "local-fs.target.wants/*", "sockets.target.wants/*udev*", "sockets.target.wants/*initctl*",
                    "basic.target.wants/*"):
        for p in systemd.glob(pattern):
            p.unlink()
    for p in (tree / "etc/systemd/system").glob("*.wants/*"):
        p.unlink()
    with (tree / "etc/systemd/journald.conf").open("a") as f:
        f.write("ReadKMsg=no\n")
    init = tree / "sbin/init"
    init.unlink(missing_ok=True)
    init.symlink_to("/usr/lib/systemd/systemd")
    executor.run(["chroot", tree, "systemctl", "enable", "kubelet.service", "containerd.service",
                  "undo-mount-hacks.service"])
    executor.run(["chroot", tree, "systemctl", "mask", "systemd-binfmt.service"])
    (tree / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)
    for t in ("containerd", "ctr", "containerd-shim-runc-v2", "crictl"):
        _install(tools[t], tree / "usr/local/bin" / t)
    _install(tools["runc"], tree / "usr/local/sbin/runc")
    _install(Path(capfilter.__file__), tree / CAPFILTER.lstrip("/"))
    for t in CNI_PLUGINS:
        _install(tools[t], tree / "opt/cni/bin" / t)
    for t in NODE_TOOLS:
        _install(tools[t], tree / "usr/bin" / t)
    # containerd's default runtime spec, with kind's product-files hook and no rlimits, as kind's
    # base build makes it (`ctr oci spec | jq …`)
    spec = json.loads(executor.run([tools["ctr"], "oci", "spec"]).stdout)
    spec.setdefault("hooks", {}).setdefault("createContainer", []).append({"path": "/kind/bin/mount-product-files.sh"})
    spec["process"].pop("rlimits", None)
    (tree / "etc/containerd/cri-base.json").write_text(json.dumps(spec, indent=2) + "\n")
    pause = next(i for i in images if "/pause:" in i)
    cfg = tree / "etc/containerd/config.toml"
    text = cfg.read_text()
    old = next((ln for ln in text.splitlines() if ln.strip().startswith("sandbox_image")), None)
    if old is None:
        raise errors.ToolError(["kind", "base"], 1, "kind's containerd config names no sandbox_image")
    text = text.replace(old, f'  sandbox_image = "{pause}"')
    # containerd starts runc through the wrapper, which only edits a spec asking for what this
    # machine's bounding set lacks
    marker = "SystemdCgroup = true"
    if text.count(marker) != 2:
        raise errors.ToolError(["kind", "base"], 1, "kind's containerd config changed: expected two runc runtimes")
    cfg.write_text(text.replace(marker, f'{marker}\n    BinaryName = "{CAPFILTER}"'))
    (tree / "kind/version").write_text(build.group_of("kubelet").version + "\n")


def _preload(tree: Path, tools: dict[str, Path], archive: Path, work: Path) -> None:
    """Import the images into the node's containerd store: this machine runs the node's own
    containerd against the node's /var/lib/containerd (no CRI, nothing unpacked, as kind's build
    imports them), so the node starts with them and never pulls."""
    sock = work / "containerd.sock"
    cfg = work / "containerd.toml"
    cfg.write_text('version = 3\ndisabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", '
                   '"io.containerd.cri.v1.images", "io.containerd.nri.v1.nri"]\n')
    proc = executor.spawn([tools["containerd"], "--config", cfg, "--root", tree / "var/lib/containerd",
                           "--state", work / "containerd-state", "--address", sock], log_path=work / "containerd.log")
    ctr: list[str | os.PathLike[str]] = [tools["ctr"], "--address", str(sock), "--namespace", "k8s.io"]
    try:
        deadline = time.monotonic() + 60
        while executor.run([*ctr, "version"], check=False, timeout=10).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise errors.ToolError(["containerd"], 1, (work / "containerd.log").read_text()[-2000:])
            time.sleep(0.2)
        executor.run([*ctr, "images", "import", "--label=io.cri-containerd.pinned=pinned", "--no-unpack", archive],
                     timeout=600)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except executor.TimeoutExpired:
            proc.kill()
            proc.wait()


def local_images() -> config.LocalImages:
    """The names kubeadm must use for the images this node image preloads."""
    return config.LocalImages(repository=REGISTRY, etcd_tag=build.group_of("etcd").version.lstrip("v"),
                              coredns_tag=build.group_of("coredns").version)
