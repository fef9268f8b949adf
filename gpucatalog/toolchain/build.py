"""Build and cache the pinned upstream tools of ``manifest.yaml``.

Called by everything that needs a tool binary (``ensure("helm")``) and by ``catalog toolchain``.
Each group is built once per version in a generated wrapper Go module; the result is cached
with a sha256 stamp, so a second call builds nothing and a corrupt or truncated binary is
rebuilt rather than trusted.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from gpucatalog.core import errors, executor


@dataclass(frozen=True)
class Group:
    name: str
    module: str
    version: str
    tools: dict[str, str]
    ldflags: tuple[str, ...]
    staging: tuple[str, ...]
    staging_version: str


def cache_root() -> Path:
    return Path(os.environ.get("GPU_CATALOG_CACHE", Path.home() / ".cache" / "gpu-catalog"))


def load_manifest() -> dict[str, Group]:
    text = resources.files("gpucatalog.toolchain").joinpath("manifest.yaml").read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    groups: dict[str, Group] = {}
    for name, g in doc["groups"].items():
        staging = g.get("staging") or {}
        groups[name] = Group(
            name=name,
            module=g["module"],
            version=g["version"],
            tools=dict(g["tools"]),
            ldflags=tuple(f.format(version=g["version"]) for f in g.get("ldflags", [])),
            staging=tuple(staging.get("modules", [])),
            staging_version=staging.get("version", ""),
        )
    return groups


def group_of(tool: str) -> Group:
    for g in load_manifest().values():
        if tool in g.tools:
            return g
    raise errors.NotFoundError(f"unknown tool {tool!r}", field="tool", expected="a tool of toolchain/manifest.yaml")


def versions() -> dict[str, str]:
    """tool name -> pinned version, for evidence and locks."""
    return {t: g.version for g in load_manifest().values() for t in g.tools}


def _bin_dir(g: Group) -> Path:
    return cache_root() / "toolchain" / "bin" / f"{g.name}-{g.version}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cached(tool: str) -> Path | None:
    """The cached binary if present and intact (its sha256 matches the stamp written at build)."""
    g = group_of(tool)
    path = _bin_dir(g) / tool
    stamp = path.with_name(tool + ".sha256")
    if not path.is_file() or not stamp.is_file():
        return None
    if stamp.read_text().strip() != _sha256(path):
        return None
    return path


@contextmanager
def _lock(g: Group) -> Iterator[None]:
    lock_path = cache_root() / "toolchain" / "locks" / f"{g.name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _write_wrapper(g: Group, src: Path) -> None:
    src.mkdir(parents=True, exist_ok=True)
    lines = [f"module gpu-catalog.invalid/build/{g.name}", "", "go 1.26", "", f"require {g.module} {g.version}"]
    if g.staging:
        lines.append("")
        lines.append("replace (")
        lines += [f"\tk8s.io/{m} => k8s.io/{m} {g.staging_version}" for m in g.staging]
        lines.append(")")
    (src / "go.mod").write_text("\n".join(lines) + "\n")
    imports = "\n".join(f'\t_ "{pkg}"' for pkg in sorted(set(g.tools.values())))
    (src / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")


def build_group(g: Group, progress: Callable[[str], None] | None = None) -> float:
    """Build every tool of ``g`` into the cache; returns seconds spent."""
    say = progress or (lambda _m: None)
    start = time.monotonic()
    src = cache_root() / "toolchain" / "src" / f"{g.name}-{g.version}"
    _write_wrapper(g, src)
    env = {"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    say(f"resolving {g.module}@{g.version}")
    executor.run(["go", "mod", "tidy"], cwd=src, env=env)
    out = _bin_dir(g)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for tool, pkg in g.tools.items():
        say(f"building {tool} {g.version}")
        ldflags = " ".join(["-s", "-w", *g.ldflags])
        executor.run(
            ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", str(staging / tool), pkg], cwd=src, env=env
        )
        (staging / f"{tool}.sha256").write_text(_sha256(staging / tool) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)  # all tools of the group appear at once, never half a group
    return time.monotonic() - start


def ensure(tool: str, progress: Callable[[str], None] | None = None) -> Path:
    """Path to ``tool``'s binary, building its group first when absent or corrupt."""
    g = group_of(tool)
    path = cached(tool)
    if path is not None:
        return path
    with _lock(g):
        path = cached(tool)  # another process may have built it while we waited
        if path is None:
            build_group(g, progress)
            path = cached(tool)
    if path is None:
        raise errors.ToolError(["go", "build", g.tools[tool]], 1, "built binary missing after build")
    return path


def ensure_all(progress: Callable[[str], None] | None = None) -> dict[str, Path]:
    return {tool: ensure(tool, progress) for g in load_manifest().values() for tool in g.tools}


def module_dir(module: str, version: str) -> Path:
    """The unpacked source of a pinned Go module (for data it ships, e.g. Kubernetes' OpenAPI spec)."""
    proc = executor.run(["go", "mod", "download", "-json", f"{module}@{version}"], env={"GOFLAGS": "-mod=mod"})
    # go prints JSON indented with tabs, which YAML does not accept.
    info: dict[str, Any] = json.loads(proc.stdout)
    if not info.get("Dir"):
        raise errors.ToolError(["go", "mod", "download", module], 1, str(info.get("Error", "no Dir")))
    return Path(info["Dir"])
