"""The node shape is the truth about the platform: every bundle profile that gives gpu-health
expected values (``agent.expect``) gives exactly those of the node shapes its cluster is made of
(gpucatalog/clusters/data/shapes.yaml). gpu-health itself never reads the shapes (it ships as its
own image); its chart values are where the shape reaches it, and this test keeps them in step."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.clusters import shapes

ROOT = Path(__file__).resolve().parents[2]
BUNDLES = sorted((ROOT / "catalog" / "bundles").glob("*/*.yaml"))


def shape_expect(name: str) -> dict[str, Any]:
    s = shapes.get(name)
    assert s.gpu is not None, f"shape {name} has no GPUs"
    out: dict[str, Any] = {"gpus": s.gpu.count, "pcieGen": s.gpu.pcie_gen, "pcieWidth": s.gpu.pcie_width,
                           "nvlinksPerGpu": s.gpu.nvlink_links}
    if s.infiniband is not None:
        m = re.match(r"([\d.]+) Gb/sec", s.infiniband.rate)
        assert m, s.infiniband.rate
        out.update(ibRateGbps=float(m.group(1)), ibPorts=len(s.infiniband.devices))
    return out


def profiles_with_expectations() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(bundle:profile, profile, agent.expect) of every profile that sets gpu-health expectations;
    the others give none, and the agent then reads node labels (gpu-health.gpu-catalog.io/expect-*)."""
    out = []
    for path in BUNDLES:
        doc = yaml.safe_load(path.read_text())
        for pname, prof in (doc["spec"].get("profiles") or {}).items():
            expect = (((prof.get("values") or {}).get("gpu-health") or {}).get("agent") or {}).get("expect")
            if expect is not None:
                out.append((f"{doc['metadata']['name']}:{pname}", prof, expect))
    return out


CASES = profiles_with_expectations()


def test_there_are_profiles_to_check() -> None:
    assert len(CASES) >= 2


@pytest.mark.parametrize(("name", "profile", "expect"), CASES, ids=[c[0] for c in CASES])
def test_profile_expectations_are_its_node_shapes(name: str, profile: dict[str, Any], expect: dict[str, Any]) -> None:
    cluster = profile["cluster"]
    names = [cluster["shape"]] + [x["shape"] for x in cluster.get("extraNodes") or []]
    # the agent runs on GPU nodes only (its nodeSelector): a CPU node of the cluster expects nothing
    gpu_shapes = [n for n in names if shapes.get(n).gpu is not None]
    assert gpu_shapes, f"{name}: gpu-health expectations, but no GPU node in {names}"
    for shape in gpu_shapes:
        want = shape_expect(shape)
        got = {k: (float(v) if k == "ibRateGbps" else v) for k, v in expect.items() if v is not None}
        assert got == want, f"{name}: gpu-health agent.expect {got} differs from node shape {shape} {want}"
