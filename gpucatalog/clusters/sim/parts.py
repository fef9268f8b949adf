"""What of a sim cluster ran for real and what was simulated, for certification evidence.

Called by ``SimCluster.live_parts`` / ``simulated_parts`` (:mod:`.cluster`), which certification
reads through the provider's ``DescribesParts`` capability. Pods are listed through the API: a
pod bound to a node whose every image is in the image map ran as a real process under the sim
kubelet; any other pod's status was only simulated by kwok.
"""

from __future__ import annotations

from typing import Any

from gpucatalog.clusters.sim import images, services
from gpucatalog.clusters.sim.layout import Layout


def _pods(core: Any) -> list[tuple[str, bool, bool]]:
    """(description, ran live, in a conformance namespace) per pod of the cluster."""
    out = []
    for p in core.list_pod_for_all_namespaces().items:
        imgs = sorted({c.image for c in p.spec.containers})
        ident = f"pod {p.metadata.namespace}/{p.metadata.name} ({', '.join(imgs)})"
        live = bool(p.spec.node_name) and all(images.lookup(i) is not None for i in imgs)
        out.append((ident, live, str(p.metadata.namespace).startswith("conformance")))
    return out


def live(lay: Layout, core: Any) -> list[str]:
    parts = services.live_parts(lay)
    parts.append("control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler (pinned builds)")
    parts.append("kwok: node and pod lifecycle of simulated nodes")
    parts += [ident + ": real process run by the sim kubelet" for ident, is_live, _ in _pods(core) if is_live]
    return parts


def simulated(lay: Layout, core: Any) -> list[str]:
    parts = services.simulated_parts(lay)
    parts.append("GPU hardware and driver: nvidia-smi XML, kernel log, InfiniBand sysfs per node folder")
    parts += [ident + ": status simulated by kwok (image not runnable here)"
              for ident, is_live, conformance in _pods(core) if not is_live and not conformance]
    return parts
