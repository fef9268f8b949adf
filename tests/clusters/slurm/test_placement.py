"""NodeSets are placed on the Kubernetes nodes of their shape (and nodeSelector), one slurmd per
node, and the Slurm nodes take those names — what lets gpu-health drain the right Slurm node."""

from __future__ import annotations

import pytest

from gpucatalog.catalog import errors
from gpucatalog.validators.clusters import slurm
from gpucatalog.validators.clusters.sim import nodes as sim_nodes
from gpucatalog.validators.clusters.sim import shapes
from gpucatalog.validators.clusters.slurm import placement

from .conftest import render

SIM_VALUES = (
    'nodesets={"h100":{"enabled":true,"replicas":2,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":8}},'
    '"h200":{"enabled":true,"replicas":1,"shape":"h200-141gb-x8","gpu":{"type":"h200","count":8}}}'
)


def _sim_nodes(*groups: tuple[str, int]) -> list[tuple[str, dict[str, str]]]:
    """(name, labels) of sim Node objects, exactly as the sim provider creates them."""
    out = []
    for shape, count in groups:
        for i in range(count):
            obj = sim_nodes.node_object(shapes.get(shape), i)
            out.append((obj["metadata"]["name"], obj["metadata"]["labels"]))
    return out


def test_nodesets_land_on_nodes_of_their_shape_and_slurm_nodes_take_their_names() -> None:
    docs = render("slurm", SIM_VALUES)
    # more nodes than needed, listed out of order: placement is by name, per shape
    nodes = list(reversed(_sim_nodes(("h200-141gb-x8", 2), ("h100-80gb-x8", 3))))
    names = placement.place(docs, nodes)
    assert names == {"h100": ["h100-node-0000", "h100-node-0001"], "h200": ["h200-node-0000"]}
    spec = slurm.from_manifests(docs, node_names=names)
    assert [n for ns in spec.nodesets for n in ns.node_names()] == ["h100-node-0000", "h100-node-0001", "h200-node-0000"]


def test_node_selector_narrows_the_choice() -> None:
    docs = render("slurm", 'nodesets={"h100":{"enabled":true,"replicas":1,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":8},'
                           '"nodeSelector":{"kubernetes.io/hostname":"h100-node-0002"}}}')
    assert placement.place(docs, _sim_nodes(("h100-80gb-x8", 3))) == {"h100": ["h100-node-0002"]}


def test_too_few_nodes_of_a_shape_is_a_conflict_naming_the_nodeset() -> None:
    docs = render("slurm", SIM_VALUES)
    with pytest.raises(errors.ConflictError) as exc:
        placement.place(docs, _sim_nodes(("h100-80gb-x8", 3)))
    assert exc.value.field == "NodeSet/h200.spec.replicas"
    assert "h200-141gb-x8" in str(exc.value)
