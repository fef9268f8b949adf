"""Pure arithmetic behind the KAI conformance suites, kept free of any cluster access so it can
be unit-tested: GPU placement accounting and the per-device oversubscription check over every
tenant's pods.

Called by ``kai.pods`` and ``fractional_gpu``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# Fractions of one GPU add up in binary floats (0.1 + 0.2 > 0.3); compare with this slack.
EPSILON = 1e-6


@dataclass(frozen=True)
class Placement:
    """Where one pod got its GPU share.

    ``gpu`` identifies the device: for a fraction pod the GPU group KAI labelled it with
    (``runai-gpu-group``), or the GPU's id when the reservation pod reported one; empty for a
    whole-GPU pod (the device plugin, not KAI, picks the device). ``fraction`` is the share of
    one device (0 < f < 1); ``gpus`` the number of whole devices.
    """

    pod: str
    node: str
    gpu: str = ""
    fraction: float = 0.0
    gpus: int = 0

    def to_dict(self) -> dict[str, object]:
        return {"pod": self.pod, "node": self.node, "gpu": self.gpu or None,
                "fraction": self.fraction or None, "gpus": self.gpus or None}


def devices_used(placements: Iterable[Placement]) -> dict[str, float]:
    """Devices in use per node: whole GPUs plus one device per distinct shared GPU."""
    whole: dict[str, int] = {}
    shared: dict[str, set[str]] = {}
    for p in placements:
        if p.gpus:
            whole[p.node] = whole.get(p.node, 0) + p.gpus
        if p.fraction:
            shared.setdefault(p.node, set()).add(p.gpu)
    return {n: float(whole.get(n, 0) + len(shared.get(n, set()))) for n in set(whole) | set(shared)}


@dataclass(frozen=True)
class GpuUse:
    """One pod's claim on a node's GPUs, whoever's pod it is (the case's, another tenant's, or
    KAI's own reservation pod).

    ``gpus``: whole devices the pod requests (a reservation pod holds one for its GPU group);
    ``group``: KAI's GPU group (``runai-gpu-group``) of a fraction pod or of a reservation pod;
    ``fraction``: the share of one device a fraction pod asked for; ``device``: the GPU id the
    reservation pod reported for its group ('' until reported).
    """

    pod: str
    node: str
    gpus: int = 0
    group: str = ""
    fraction: float = 0.0
    device: str = ""
    reservation: bool = False


def oversubscription(uses: Sequence[GpuUse], capacity: Mapping[str, int]) -> list[str]:
    """Every way ``uses`` (all pods bound to the nodes, of every tenant) overcommit a physical GPU
    or a node; empty when none does.

    Per physical GPU (the id a reservation pod reported, else the GPU group), the fractions of
    every group on it may add up to at most one device; no device may be reserved by two groups;
    per node, whole-GPU pods (reservation pods included, plus one device for a shared group that
    holds no reservation pod) may not exceed its GPUs.
    """
    problems: list[str] = []
    whole: dict[str, int] = {}
    held: dict[tuple[str, str], str] = {}  # (node, group) -> the device its reservation pod holds
    reserved_by: dict[tuple[str, str], list[str]] = {}  # (node, device) -> groups reserving it
    for u in uses:
        whole[u.node] = whole.get(u.node, 0) + u.gpus
        if u.reservation and u.group:
            device = u.device or f"group {u.group}"
            held[(u.node, u.group)] = device
            if u.device:
                reserved_by.setdefault((u.node, u.device), []).append(u.group)
    per_device: dict[tuple[str, str], list[GpuUse]] = {}
    for u in uses:
        if not u.fraction:
            continue
        if not u.group:
            problems.append(f"fraction pod {u.pod} on {u.node} carries no GPU group")
            continue
        if (u.node, u.group) not in held:
            held[(u.node, u.group)] = f"group {u.group}"
            whole[u.node] = whole.get(u.node, 0) + 1  # the shared device counts even unreserved
        per_device.setdefault((u.node, held[(u.node, u.group)]), []).append(u)
    for (node, device), groups in sorted(reserved_by.items()):
        if len(groups) > 1:
            problems.append(f"GPU {device} on {node} is reserved by {len(groups)} GPU groups ({', '.join(sorted(groups))})")
    for (node, device), pods in sorted(per_device.items()):
        total = sum(p.fraction for p in pods)
        if total > 1.0 + EPSILON:
            names = ", ".join(f"{p.pod}={p.fraction:g}" for p in sorted(pods, key=lambda x: x.pod))
            problems.append(f"GPU {device} on {node} carries {total:g} of a device ({names})")
    for node, used in sorted(whole.items()):
        have = capacity.get(node, 0)
        if used > have:
            problems.append(f"node {node} holds {used} GPUs (whole-GPU pods, reservation pods, shared GPUs) but has {have}")
    return problems
