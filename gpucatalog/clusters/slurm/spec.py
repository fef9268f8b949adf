"""What a local Slurm cluster is made of, read from the ``slurm`` bundle's rendered manifests.

The ``slurm`` chart renders Slinky CRs (``Controller``, ``NodeSet``, …). This module turns those
same objects into a :class:`ClusterSpec` — NodeSets with their replica count and
``Gres=gpu:<type>:N``, and the controller's ``extraConf`` lines (``GresTypes``, preemption,
``PartitionName=…``) — so the live sim cluster runs exactly the Slurm settings that ship, and
nothing is written by hand a second time. Called by :mod:`.cluster` and by the sim provider.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucatalog.core import errors

SLINKY_GROUP = "slinky.slurm.net"
_GRES_RE = re.compile(r"^gpu:(?P<type>[A-Za-z0-9_.-]+):(?P<count>\d+)$")


@dataclass(frozen=True)
class NodeSetSpec:
    """One Slinky NodeSet: ``replicas`` Slurm nodes named ``<name>-<i>``, each with ``gpus`` GPUs."""

    name: str
    replicas: int
    gpu_type: str
    gpus: int
    # Sim node size: enough cores that GPU jobs, not CPUs, are the scarce resource.
    cpus: int = 16
    memory_mb: int = 4096
    # Explicit Slurm node names (e.g. the sim's Kubernetes node names, so gpu-health drains the
    # Slurm node of the Kubernetes node it quarantines); default ``<name>-<i>`` as Slinky names pods.
    names: tuple[str, ...] = ()

    def node_names(self) -> list[str]:
        if self.names:
            return list(self.names)
        return [f"{self.name}-{i}" for i in range(self.replicas)]


@dataclass(frozen=True)
class PartitionSpec:
    """A ``PartitionName=`` line of the controller's configuration, parsed."""

    name: str
    nodes: tuple[str, ...]
    priority_tier: int
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterSpec:
    cluster_name: str
    nodesets: tuple[NodeSetSpec, ...]
    # slurm.conf lines the controller ships (``extraConf``), in order, verbatim.
    extra_conf: tuple[str, ...] = ()
    accounting: bool = True

    @property
    def partitions(self) -> list[PartitionSpec]:
        return [p for p in (parse_partition(line) for line in self.extra_conf) if p is not None]

    def node_count(self) -> int:
        return sum(ns.replicas for ns in self.nodesets)


def parse_kv(text: str) -> dict[str, str]:
    """``Key=Value Key2=Value2`` (one slurm.conf line) -> dict; keys keep their case."""
    out: dict[str, str] = {}
    for tok in text.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out


def conf_lines(extra_conf: str) -> list[str]:
    """Non-empty, non-comment lines of an ``extraConf`` string."""
    return [ln.strip() for ln in extra_conf.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def parse_partition(line: str) -> PartitionSpec | None:
    kv = parse_kv(line)
    if "PartitionName" not in kv:
        return None
    tier = kv.get("PriorityTier", "1")
    try:
        priority_tier = int(tier)
    except ValueError as exc:
        raise errors.InputError(f"PriorityTier {tier!r} is not a number", field="PartitionName=" + kv["PartitionName"]) from exc
    nodes = tuple(n for n in kv.get("Nodes", "").split(",") if n)
    opts = {k: v for k, v in kv.items() if k not in ("PartitionName", "Nodes", "PriorityTier")}
    return PartitionSpec(name=kv["PartitionName"], nodes=nodes, priority_tier=priority_tier, options=opts)


def parse_gres(value: str, where: str) -> tuple[str, int]:
    """``gpu:h100:8`` -> ("h100", 8); anything else is bad input."""
    m = _GRES_RE.match(value)
    if not m:
        raise errors.InputError(f"Gres {value!r} is not gpu:<type>:<count>", field=where, expected="gpu:<type>:<count>")
    return m.group("type"), int(m.group("count"))


def _is_slinky(doc: Mapping[str, Any], kind: str) -> bool:
    return str(doc.get("apiVersion", "")).startswith(SLINKY_GROUP + "/") and doc.get("kind") == kind


def from_manifests(
    docs: Iterable[Mapping[str, Any]],
    *,
    accounting: bool | None = None,
    node_names: Mapping[str, Sequence[str]] | None = None,
) -> ClusterSpec:
    """Build the spec from the rendered ``slurm`` chart (a list of Kubernetes objects).

    Exactly one ``Controller`` is expected; every ``NodeSet`` must carry ``Gres=gpu:<type>:N``
    in ``spec.extraConf`` (the static validator reports the same problems as findings first).
    ``accounting`` defaults to whether the Controller references an Accounting CR.
    ``node_names`` optionally names each NodeSet's Slurm nodes (one name per replica).
    """
    docs = [d for d in docs if isinstance(d, Mapping)]
    controllers = [d for d in docs if _is_slinky(d, "Controller")]
    if len(controllers) != 1:
        raise errors.InputError(f"expected one Slinky Controller in the rendered slurm chart, found {len(controllers)}")
    ctrl = controllers[0]
    cspec = ctrl.get("spec") or {}
    nodesets: list[NodeSetSpec] = []
    for d in docs:
        if not _is_slinky(d, "NodeSet"):
            continue
        name = str(d["metadata"]["name"])
        spec = d.get("spec") or {}
        kv = parse_kv(str(spec.get("extraConf", "")))
        if "Gres" not in kv:
            raise errors.InputError("NodeSet has no Gres= in extraConf", field=f"NodeSet/{name}.spec.extraConf", expected="Gres=gpu:<type>:<count>")
        gpu_type, gpus = parse_gres(kv["Gres"], f"NodeSet/{name}.spec.extraConf")
        replicas = int(spec.get("replicas", 1))
        names = tuple((node_names or {}).get(name, ()))
        if names and len(names) != replicas:
            raise errors.InputError(
                f"{len(names)} node names given for NodeSet {name} with {replicas} replicas",
                field=f"NodeSet/{name}.spec.replicas", expected=f"{replicas} names",
            )
        nodesets.append(NodeSetSpec(name=name, replicas=replicas, gpu_type=gpu_type, gpus=gpus, names=names))
    if not nodesets:
        raise errors.InputError("the rendered slurm chart has no NodeSet")
    return ClusterSpec(
        cluster_name=str(cspec.get("clusterName") or ctrl["metadata"]["name"]),
        nodesets=tuple(nodesets),
        extra_conf=tuple(conf_lines(str(cspec.get("extraConf", "")))),
        accounting=bool(cspec.get("accountingRef")) if accounting is None else accounting,
    )
