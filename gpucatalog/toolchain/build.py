"""Build and cache the pinned upstream tools of ``manifest.yaml``.

Called by everything that needs a tool binary (``ensure("helm")``) and by ``catalog toolchain``.
Each group is built once per version in a generated wrapper Go module; the result is cached
with a sha256 stamp, so a second call builds nothing and a corrupt or truncated binary is
rebuilt rather than trusted. A group with ``supported`` releases (Kubernetes) can be built at any
of them (``ensure("kube-apiserver", version="v1.35.4")``); the default is its pinned ``version``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpucatalog.core import cachedir, errors, executor


@dataclass(frozen=True)
class Group:
    name: str
    module: str
    version: str
    tools: dict[str, str]
    ldflags: tuple[str, ...]
    staging: tuple[str, ...]
    staging_version: str
    # releases this group may also be built at (empty: only ``version``)
    supported: tuple[str, ...] = ()
    # unformatted ldflags ({version}, {minor}), to make the group at another supported release
    ldflag_templates: tuple[str, ...] = ()
    # built on first use only, never by ``ensure_all`` (``make setup``): nothing the tests or the
    # main job run needs it (kind, used only where a Docker engine runs)
    on_demand: bool = False
    # the tools are test binaries (``go test -c`` of a package with only _test.go files, e.g. an
    # upstream end-to-end suite), not commands
    test_binary: bool = False
    # built with cgo (runc's nsenter is C); the binaries then need the C library they were linked
    # against, which the kind node image (Debian, as this machine) has
    cgo: bool = False
    # Go build tags (containerd's no_btrfs and the like, runc's seccomp)
    tags: tuple[str, ...] = ()
    # build with -trimpath (reproducible binaries); off for an upstream integration test that
    # finds its own source files at run time (Kubernetes' test API server resolves its package path)
    trimpath: bool = True

    def at(self, version: str | None) -> Group:
        """This group built at ``version`` (one of ``supported``); itself for None or its own version.
        Another release's staging modules are read from that release's go.mod at build time."""
        if version is None or version == self.version:
            return self
        if version not in self.supported:
            raise errors.InputError(
                f"{self.module} {version} is not a supported release", field="--kubernetes",
                expected=", ".join(self.supported) or self.version)
        return dataclasses.replace(
            self, version=version, ldflags=_ldflags(self.ldflag_templates, version), staging=(),
            staging_version=_staging_version(version) if self.staging_version else "")


def _minor(version: str) -> str:
    parts = version.lstrip("v").split(".")
    return parts[1] if len(parts) > 1 else ""


def _ldflags(templates: tuple[str, ...], version: str) -> tuple[str, ...]:
    return tuple(f.format(version=version, minor=_minor(version)) for f in templates)


def _staging_version(version: str) -> str:
    """k8s.io/kubernetes v1.X.Y publishes its staging modules as v0.X.Y."""
    _major, minor, patch = version.lstrip("v").split(".")[:3]
    return f"v0.{minor}.{patch}"


def cache_root() -> Path:
    return cachedir.root()


def load_manifest() -> dict[str, Group]:
    text = resources.files("gpucatalog.toolchain").joinpath("manifest.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    groups: dict[str, Group] = {}
    for name, g in doc["groups"].items():
        staging = g.get("staging") or {}
        templates = tuple(g.get("ldflags", []))
        groups[name] = Group(
            name=name,
            module=g["module"],
            version=g["version"],
            tools=dict(g["tools"]),
            ldflags=_ldflags(templates, g["version"]),
            staging=tuple(staging.get("modules", [])),
            staging_version=staging.get("version", ""),
            supported=tuple(g.get("supported", [])),
            ldflag_templates=templates,
            on_demand=bool(g.get("onDemand", False)),
            test_binary=bool(g.get("testBinary", False)),
            cgo=bool(g.get("cgo", False)),
            tags=tuple(g.get("tags", [])),
            trimpath=bool(g.get("trimpath", True)),
        )
    return groups


def group_of(tool: str, version: str | None = None) -> Group:
    """The group that builds ``tool``, at ``version`` (default: the group's pinned one)."""
    for g in load_manifest().values():
        if tool in g.tools:
            return g.at(version)
    raise errors.NotFoundError(f"unknown tool {tool!r}", field="tool", expected="a tool of toolchain/manifest.yaml")


def versions(kubernetes: str | None = None) -> dict[str, str]:
    """tool name -> pinned version, for evidence and locks; ``kubernetes`` (a supported release)
    replaces the Kubernetes group's default."""
    out = {t: g.version for g in load_manifest().values() for t in g.tools}
    if kubernetes is not None:
        out.update({t: kubernetes for t in group_of("kube-apiserver", kubernetes).tools})
    return out


def _bin_dir(g: Group) -> Path:
    return cache_root() / "toolchain" / "bin" / f"{g.name}-{g.version}"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tool_path(tool: str, version: str | None = None) -> Path:
    """Where ``tool``'s binary is (or will be) cached, built or not; ``cached`` checks it."""
    return _bin_dir(group_of(tool, version)) / tool


def cached(tool: str, version: str | None = None) -> Path | None:
    """The cached binary if present and intact (its sha256 matches the stamp written at build)."""
    path = tool_path(tool, version)
    stamp = path.with_name(tool + ".sha256")
    if not path.is_file() or not stamp.is_file():
        return None
    if stamp.read_text().strip() != sha256_file(path):
        return None
    return path


def stamped_sha256(tool: str, version: str | None = None) -> str:
    """The sha256 of ``tool``'s cached binary as its stamp records it (``cached``/``ensure`` have
    checked the two agree), so a caller that just ensured a tool need not hash it again."""
    path = tool_path(tool, version)
    return path.with_name(tool + ".sha256").read_text().strip()


@contextmanager
def _lock(g: Group) -> Iterator[None]:
    # the default release keeps its historic lock name; another release locks only itself
    default = load_manifest()[g.name].version == g.version
    lock_path = cache_root() / "toolchain" / "locks" / (f"{g.name}.lock" if default else f"{g.name}-{g.version}.lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


_STAGING_REPLACE = re.compile(r"^\s*k8s\.io/([A-Za-z0-9._-]+)\s+=>\s+\./staging/src/k8s\.io/\1\s*$", re.M)


def staging_modules(go_mod: str) -> tuple[str, ...]:
    """The staging modules a k8s.io/kubernetes go.mod replaces with its own directories."""
    return tuple(_STAGING_REPLACE.findall(go_mod))


def _staging_of(g: Group) -> tuple[str, ...]:
    """``g.staging``, or (another release) the staging modules its own go.mod names."""
    if g.staging or not g.staging_version:
        return g.staging
    proc = executor.run(["go", "mod", "download", "-json", f"{g.module}@{g.version}"], env={"GOFLAGS": "-mod=mod"})
    info: dict[str, Any] = json.loads(proc.stdout)
    if not info.get("GoMod"):
        raise errors.ToolError(["go", "mod", "download", f"{g.module}@{g.version}"], 1, str(info.get("Error", "no GoMod")))
    found = staging_modules(Path(info["GoMod"]).read_text())
    if not found:
        raise errors.ToolError(["go", "mod", "download", f"{g.module}@{g.version}"], 1, "its go.mod names no staging modules")
    return found


def _write_wrapper(g: Group, src: Path) -> None:
    src.mkdir(parents=True, exist_ok=True)
    lines = [f"module gpu-catalog.invalid/build/{g.name}", "", "go 1.26", "", f"require {g.module} {g.version}"]
    staging = _staging_of(g)
    if staging:
        lines.append("")
        lines.append("replace (")
        lines += [f"\tk8s.io/{m} => k8s.io/{m} {g.staging_version}" for m in staging]
        lines.append(")")
    (src / "go.mod").write_text("\n".join(lines) + "\n")
    if g.test_binary:  # a test-only package cannot be imported; go test resolves it from the require
        (src / "tools.go").unlink(missing_ok=True)
        return
    imports = "\n".join(f'\t_ "{pkg}"' for pkg in sorted(set(g.tools.values())))
    (src / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")


def _default_binary_name(pkg: str) -> str:
    """The file ``go build -o DIR/`` writes for main package ``pkg`` (a /vN suffix is skipped)."""
    parts = pkg.split("/")
    return parts[-2] if len(parts) > 1 and re.fullmatch(r"v[0-9]+", parts[-1]) else parts[-1]


def build_group(g: Group, progress: Callable[[str], None] | None = None) -> float:
    """Build every tool of ``g`` into the cache; returns seconds spent."""
    say = progress or (lambda _m: None)
    start = time.monotonic()
    src = cache_root() / "toolchain" / "src" / f"{g.name}-{g.version}"
    _write_wrapper(g, src)
    env = {"CGO_ENABLED": "1" if g.cgo else "0", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    if not g.test_binary:
        say(f"resolving {g.module}@{g.version}")
        executor.run(["go", "mod", "tidy"], cwd=src, env=env)
    out = _bin_dir(g)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    say(f"building {', '.join(g.tools)} {g.version}")
    ldflags = " ".join(["-s", "-w", *g.ldflags])
    flags = [*(["-trimpath"] if g.trimpath else []), "-ldflags", ldflags, *(["-tags", ",".join(g.tags)] if g.tags else [])]
    # one go build for every tool of the group: the packages they share are loaded and compiled
    # once, and the binaries link side by side
    built = staging / "out"
    if g.test_binary:  # go test -c takes one package at a time
        for tool, pkg in g.tools.items():
            executor.run(["go", "test", "-c", *flags, "-o", str(built / tool), pkg],
                         cwd=src, env=env)
    else:
        executor.run(["go", "build", *flags, "-o", str(built) + "/", *g.tools.values()],
                     cwd=src, env=env)
    for tool, pkg in g.tools.items():
        (built / (tool if g.test_binary else _default_binary_name(pkg))).rename(staging / tool)
        (staging / f"{tool}.sha256").write_text(sha256_file(staging / tool) + "\n")
    built.rmdir()
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)  # all tools of the group appear at once, never half a group
    seconds = time.monotonic() - start
    say(f"built {', '.join(g.tools)} {g.version} in {seconds:.0f} s")
    return seconds


def ensure(tool: str, progress: Callable[[str], None] | None = None, version: str | None = None) -> Path:
    """Path to ``tool``'s binary (at ``version``, default the pinned one), building its group
    first when absent or corrupt."""
    g = group_of(tool, version)
    path = cached(tool, version)
    if path is not None:
        return path
    with _lock(g):
        path = cached(tool, version)  # another process may have built it while we waited
        if path is None:
            build_group(g, progress)
            path = cached(tool, version)
    if path is None:
        raise errors.ToolError(["go", "build", g.tools[tool]], 1, "built binary missing after build")
    return path


def ensure_all(progress: Callable[[str], None] | None = None, jobs: int | None = None) -> dict[str, Path]:
    """Every tool of every group except the on-demand ones, building up to ``jobs`` missing groups
    at once (default: one per two cores; each ``go build`` already uses every core, and on 2 cores
    two groups at once took as long as one after another: 14.5 min cold against 13.3). The Go build
    cache is shared, so a package two groups need is compiled once."""
    jobs = jobs if jobs is not None else max(1, (os.cpu_count() or 1) // 2)
    groups = [g for g in load_manifest().values() if not g.on_demand]
    paths: dict[str, Path] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        # the first failure is raised; the other builds still finish (the pool waits for them)
        for found in pool.map(lambda g: {tool: ensure(tool, progress) for tool in g.tools}, groups):
            paths.update(found)
    return paths


def module_dir(module: str, version: str) -> Path:
    """The unpacked source of a pinned Go module (for data it ships, e.g. Kubernetes' OpenAPI spec)."""
    proc = executor.run(["go", "mod", "download", "-json", f"{module}@{version}"], env={"GOFLAGS": "-mod=mod"})
    # go prints JSON indented with tabs, which YAML does not accept.
    info: dict[str, Any] = json.loads(proc.stdout)
    if not info.get("Dir"):
        raise errors.ToolError(["go", "mod", "download", module], 1, str(info.get("Error", "no Dir")))
    return Path(info["Dir"])
