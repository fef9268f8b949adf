"""NodeSets are placed on the Kubernetes nodes of their shape (and nodeSelector), one slurmd per
node, and the Slurm nodes take those names — what lets gpu-health drain the right Slurm node."""

from __future__ import annotations

import pytest

from gpucatalog.clusters import shapes, slurm
from gpucatalog.clusters.sim import nodes as sim_nodes
from gpucatalog.clusters.slurm import placement
from gpucatalog.core import errors
from tests.conftest import RenderChart

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


def test_nodesets_land_on_nodes_of_their_shape_and_slurm_nodes_take_their_names(render_chart: RenderChart) -> None:
    docs = render_chart("slurm", set_json=[SIM_VALUES])
    # more nodes than needed, listed out of order: placement is by name, per shape
    nodes = list(reversed(_sim_nodes(("h200-141gb-x8", 2), ("h100-80gb-x8", 3))))
    names = placement.place(docs, nodes)
    assert names == {"h100": ["h100-node-0000", "h100-node-0001"], "h200": ["h200-node-0000"]}
    spec = slurm.from_manifests(docs, node_names=names)
    assert [n for ns in spec.nodesets for n in ns.node_names()] == ["h100-node-0000", "h100-node-0001", "h200-node-0000"]


def test_node_selector_narrows_the_choice(render_chart: RenderChart) -> None:
    docs = render_chart("slurm", set_json=['nodesets={"h100":{"enabled":true,"replicas":1,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":8},'
                           '"nodeSelector":{"kubernetes.io/hostname":"h100-node-0002"}}}'])
    assert placement.place(docs, _sim_nodes(("h100-80gb-x8", 3))) == {"h100": ["h100-node-0002"]}


def test_too_few_nodes_of_a_shape_is_a_conflict_naming_the_nodeset(render_chart: RenderChart) -> None:
    docs = render_chart("slurm", set_json=[SIM_VALUES])
    with pytest.raises(errors.ConflictError) as exc:
        placement.place(docs, _sim_nodes(("h100-80gb-x8", 3)))
    assert exc.value.field == "NodeSet/h200.spec.replicas"
    assert "h200-141gb-x8" in str(exc.value)
