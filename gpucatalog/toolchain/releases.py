"""Which Kubernetes releases the sim can run, and what ``--kubernetes 1.35`` means.

Called by ``catalog cluster up/certify/matrix --kubernetes``, by the sim provider and by the
matrix pipeline. The list is data: ``supported`` of the Kubernetes group in ``manifest.yaml``
(one patch release per minor; the Go module proxy serves each). A minor (``1.35``) names that
minor's listed patch; a full version must be listed exactly.
"""

from __future__ import annotations

from gpucatalog.core import errors
from gpucatalog.toolchain import build

GROUP = "kubernetes"


def supported() -> tuple[str, ...]:
    """Every release the sim may run, oldest first (``v1.34.4``, …)."""
    g = build.load_manifest()[GROUP]
    return g.supported or (g.version,)


def default() -> str:
    """The release a cluster runs when nothing else is asked for (the toolchain's pin)."""
    return build.load_manifest()[GROUP].version


def minor(version: str) -> str:
    """``v1.35.4`` -> ``1.35``."""
    parts = version.lstrip("v").split(".")
    return ".".join(parts[:2])


def resolve(spec: str, field: str = "--kubernetes") -> str:
    """``1.35``, ``v1.35`` or ``1.35.4`` -> the supported release ``v1.35.4``; bad input names
    the supported ones."""
    want = spec.strip().lstrip("v")
    for release in supported():
        if want in (release.lstrip("v"), minor(release)):
            return release
    raise errors.InputError(
        f"Kubernetes {spec!r} is not a release the catalog lists", field=field,
        expected=", ".join(f"{minor(r)} ({r})" for r in supported()))


def resolve_list(spec: str, field: str = "--kubernetes") -> list[str]:
    """``1.34,1.35`` -> the releases, in the order given, without repeats."""
    out: list[str] = []
    for part in (p for p in spec.split(",") if p.strip()):
        release = resolve(part, field)
        if release not in out:
            out.append(release)
    if not out:
        raise errors.InputError("no Kubernetes version given", field=field,
                                expected=", ".join(minor(r) for r in supported()))
    return out
