"""A user's image-map overlay on kind: which of their binaries really ran, for the evidence.

On kind a mapped binary runs inside an image built from it (:func:`.images.mapped_refs`,
``images._user_binary``) under the name the bundle gives it. Whether it ran is read from the
cluster: a pod counts once a container of that image has started (running, or ended after a
start). The facts match the sim's (``sim.parts.mapped_images``), so certification treats both
providers alike: sha256, reported version, the pods, the tags, and whether a tag that ran names
another version than the binary reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpucatalog.clusters.kind import images
from gpucatalog.clusters.sim import binversion, imagemap


def _started(status: Any) -> bool:
    state = status.state
    return bool(state and (state.running or (state.terminated and state.terminated.started_at))) or bool(
        status.restart_count)


def ran_by_image(pods: Sequence[Any]) -> dict[str, set[str]]:
    """Image reference -> the pods (``namespace/name``) in which a container of it started."""
    out: dict[str, set[str]] = {}
    for p in pods:
        specs = {c.name: c.image for c in [*(p.spec.init_containers or []), *(p.spec.containers or [])]}
        statuses = [*(p.status.init_container_statuses or []), *(p.status.container_statuses or [])]
        for st in statuses:
            if st.name in specs and _started(st):
                out.setdefault(specs[st.name], set()).add(f"{p.metadata.namespace}/{p.metadata.name}")
    return out


def mapped_images(binaries: Sequence[imagemap.MappedBinary], built: Sequence[images.Built],
                  pods: Sequence[Any]) -> list[dict[str, Any]]:
    """Per overlay binary: its facts, the images built from it, the pods that ran them, ``live``
    when any did, ``version_matches`` False when a tag that ran names another version."""
    ran = ran_by_image(pods)
    served = images.mapped_refs([b.ref for b in built if b.user_supplied], binaries)
    out = []
    for b in binaries:
        refs = [ref for ref, entry in served.items() if entry == b]
        pods_ran = sorted({p for ref in refs for p in ran.get(ref, set())})
        tags = sorted({images.split_ref(ref)[1] for ref in refs if ran.get(ref)})
        versions = [t for t in tags if binversion.VERSION.fullmatch(t)]
        out.append({**b.to_dict(), "ran": pods_ran, "tags": tags, "live": bool(pods_ran),
                    "version_matches": all(t.lstrip("v") == b.version.lstrip("v") for t in versions),
                    "userSupplied": True, "refused": []})
    return out


def lines(facts: Sequence[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(live, not run) evidence lines, worded as the sim's."""
    return imagemap.evidence_lines(facts, ", built into a local image")
