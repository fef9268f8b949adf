"""What of a sim cluster ran for real and what was simulated, for certification evidence.

Called by ``SimCluster.live_parts`` / ``simulated_parts`` / ``mapped_images`` (:mod:`.cluster`),
which certification reads through the provider's capabilities. Pods are listed through the API
and judged by the cluster's own image map (shipped + its overlay): a pod ran live only when it is
bound, every image is mapped, and the sim kubelet started a process for each container (its
status carries a ``sim://<pid>`` container ID); a mapped pod the sim kubelet never started
(StartError, still creating) is not live. Any other pod's status was only simulated by kwok.
Each overlay image is listed with its executable's sha256 and reported version, as user-supplied,
with the pods that really ran it and any start the sim kubelet refused because the file changed
after it was hashed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpucatalog.clusters.sim import binversion, imagemap, images, services
from gpucatalog.clusters.sim.layout import Layout


@dataclass(frozen=True)
class _Pod:
    ident: str  # "pod ns/name (images)"
    name: str  # "ns/name"
    images: tuple[str, ...]
    served: tuple[str | None, ...]  # per image, the image map entry that served it (its ``image``)
    live: bool
    conformance: bool
    stand_in: str  # what a sim-only program of its images stood in for ('' for none)


def _started(p: Any) -> bool:
    """The sim kubelet started a process for every container (a ``sim://<pid>`` with pid > 0)."""
    statuses = (p.status.container_statuses or []) if p.status else []
    ids = {cs.name: str(cs.container_id or "") for cs in statuses}
    return bool(ids) and all(ids.get(c.name, "").removeprefix("sim://") not in ("", "0") for c in p.spec.containers)


def _pods(lay: Layout, core: Any) -> list[_Pod]:
    table = images.merged(imagemap.read(lay.image_map))
    out = []
    for p in core.list_pod_for_all_namespaces().items:
        imgs = tuple(sorted({c.image for c in p.spec.containers}))
        entries = [images.lookup(i, table) for i in imgs]
        mapped = all(e is not None for e in entries)
        name = f"{p.metadata.namespace}/{p.metadata.name}"
        out.append(_Pod(ident=f"pod {name} ({', '.join(imgs)})", name=name, images=imgs,
                        served=tuple(None if e is None else e.image for e in entries),
                        live=bool(p.spec.node_name) and mapped and _started(p),
                        conformance=str(p.metadata.namespace).startswith("conformance"),
                        stand_in="; ".join(e.stand_in for e in entries if e is not None and e.stand_in)))
    return out


def mapped_images(lay: Layout, core: Any) -> list[dict[str, Any]]:
    """Per overlay image: the executable, its sha256 and reported version, the pods that really
    ran it and their image tags; ``live`` only when at least one did; ``version_matches`` False
    when a tag that ran is a version and the executable reports another one."""
    pods = _pods(lay, core)
    refused = imagemap.refused(lay.image_map_refused)
    out = []
    for b in imagemap.read(lay.image_map):
        # the pods whose image this entry served (a tag's own entry comes before its repository's)
        ran = [(p.name, ref) for p in pods if p.live for ref, entry in zip(p.images, p.served, strict=True)
               if entry == b.image]
        tags = sorted({ref[len(images.repository(ref)):].lstrip(":").split("@")[0] for _n, ref in ran} - {""})
        versions = [t for t in tags if binversion.VERSION.fullmatch(t)]
        out.append({**b.to_dict(), "ran": sorted({n for n, _ref in ran}), "tags": tags, "live": bool(ran),
                    "version_matches": all(t.lstrip("v") == b.version.lstrip("v") for t in versions),
                    # the user's binary, never the project's: an overlay maps only what the user brings
                    "userSupplied": True,
                    # starts refused because the file changed after load (it never ran under this sha256)
                    "refused": sorted(set(refused.get(b.image, [])))})
    return out


def _binary_lines(lay: Layout, core: Any) -> tuple[list[str], list[str]]:
    return imagemap.evidence_lines(mapped_images(lay, core))


def live(lay: Layout, core: Any) -> list[str]:
    parts = services.live_parts(lay)
    parts.append("control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler (pinned builds)")
    parts.append("kwok: node and pod lifecycle of simulated nodes")
    parts += _binary_lines(lay, core)[0]
    for p in _pods(lay, core):
        if p.live and not p.stand_in:
            base = [ref for ref, entry in zip(p.images, p.served, strict=True) if entry in images.base_images()]
            own = f" (its containers' own commands: {', '.join(base)} on the sim's root file system)" if base else ""
            parts.append(p.ident + ": real process run by the sim kubelet" + own)
    return parts


def simulated(lay: Layout, core: Any) -> list[str]:
    parts = services.simulated_parts(lay)
    parts.append("GPU hardware and driver: nvidia-smi XML, kernel log, InfiniBand sysfs per node folder")
    parts += _binary_lines(lay, core)[1]
    pods = _pods(lay, core)
    parts += [p.ident + f": SIM STAND-IN run by the sim kubelet for {p.stand_in}" for p in pods if p.live and p.stand_in]
    parts += [p.ident + ": status simulated by kwok (image not runnable here, or never started)"
              for p in pods if not p.live and not p.conformance]
    return parts
