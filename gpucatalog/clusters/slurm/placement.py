"""Which Kubernetes nodes a bundle's Slinky NodeSets land on, so Slurm nodes carry their names.

Slinky runs one slurmd pod per NodeSet replica on a node that matches the NodeSet's pod
``nodeSelector``; the catalog's ``slurm`` chart also records each NodeSet's node shape in the
``gpucatalog.io/node-shape`` annotation, matched against the node's instance type. The sim has
no operator to place pods, so it places them here — each NodeSet (by name) takes the first
matching free nodes (by name), one slurmd per node — and names every Slurm node after its
Kubernetes node. That way gpu-health, which knows only Kubernetes node names, drains the right
Slurm node. Called by the sim provider before it starts the Slurm cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpucatalog.core import errors

SHAPE_ANNOTATION = "gpucatalog.io/node-shape"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
SLINKY_GROUP = "slinky.slurm.net"


def _nodesets(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    found = [o for o in objects
             if str(o.get("apiVersion", "")).startswith(SLINKY_GROUP + "/") and o.get("kind") == "NodeSet"]
    return sorted(found, key=lambda o: str(o["metadata"]["name"]))


def _matches(ns: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    spec = ns.get("spec") or {}
    selector = (((spec.get("template") or {}).get("spec") or {}).get("nodeSelector")) or {}
    if any(labels.get(str(k)) != str(v) for k, v in selector.items()):
        return False
    shape = ((ns.get("metadata") or {}).get("annotations") or {}).get(SHAPE_ANNOTATION)
    return shape is None or labels.get(INSTANCE_TYPE) == str(shape)


def place(objects: Iterable[Mapping[str, Any]], nodes: Sequence[tuple[str, Mapping[str, str]]]) -> dict[str, list[str]]:
    """NodeSet name -> the Kubernetes node names of its replicas (``nodes``: (name, labels)).

    Not enough matching nodes for a NodeSet is a conflict between bundle and cluster.
    """
    free = sorted(nodes, key=lambda n: n[0])
    out: dict[str, list[str]] = {}
    for ns in _nodesets(objects):
        name = str(ns["metadata"]["name"])
        replicas = int((ns.get("spec") or {}).get("replicas", 1))
        picked = [n for n, labels in free if _matches(ns, labels)][:replicas]
        if len(picked) < replicas:
            shape = ((ns.get("metadata") or {}).get("annotations") or {}).get(SHAPE_ANNOTATION, "any shape")
            raise errors.ConflictError(
                f"NodeSet {name} wants {replicas} nodes ({shape}), the cluster has {len(picked)} free matching nodes",
                field=f"NodeSet/{name}.spec.replicas", expected=f"at most {len(picked)}, or more {shape} nodes",
            )
        out[name] = picked
        free = [n for n in free if n[0] not in picked]
    return out
