"""The shipped ``slurm`` bundle validates clean, and the seeded bad inputs of the Slurm issue (a
NodeSet whose gres count disagrees with its node shape, a partition naming a missing NodeSet, a
Slurm version the catalog does not support) fail ``catalog validate`` with exit 1, naming the
object and field, before anything is installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.catalog import loader, render
from gpucatalog.cli import main

pytestmark = pytest.mark.toolchain  # renders with the pinned helm

REPO = Path(__file__).resolve().parents[2]


def _add_profile(catalog: Path, values: str) -> None:
    """Append a ``broken`` profile (sim cluster, the given ``values:`` block) to the slurm bundle."""
    bundle = catalog / "bundles" / "slurm" / "0.1.0.yaml"
    bundle.write_text(bundle.read_text() + "    broken:\n      description: seeded bad input\n"
                      "      cluster: {provider: sim, nodes: 2, shape: h100-80gb-x8}\n      values:\n" + values)


@pytest.mark.parametrize("profile", ["sim", "kind", "h100-8x"])
def test_shipped_slurm_bundle_validates_clean(profile: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "slurm", "--profile", profile]) == 0
    assert "no findings" in capsys.readouterr().out


def test_sim_profile_nodesets_match_the_sim_cluster_nodes() -> None:
    """The sim profile starts one node group per NodeSet shape, with at least its replicas."""
    cat = loader.load_catalog(REPO / "catalog")
    rb = render.render_bundle(cat, "slurm", "sim")
    groups: dict[str, int] = {str(rb.cluster["shape"]): int(rb.cluster["nodes"])}
    for g in rb.cluster.get("extraNodes", []):
        groups[str(g["shape"])] = groups.get(str(g["shape"]), 0) + int(g["nodes"])
    slurm = next(c for c in rb.components if c.name == "slurm")
    wanted: dict[str, int] = {}
    for o in slurm.objects:
        if o["kind"] == "NodeSet":
            shape = o["metadata"]["annotations"]["gpucatalog.io/node-shape"]
            wanted[shape] = wanted.get(shape, 0) + int(o["spec"]["replicas"])
    assert wanted == {"h100-80gb-x8": 2, "h200-141gb-x8": 1}
    assert groups == wanted
    gh = next(c for c in rb.components if c.name == "gpu-health")
    ctrl = next(o for o in gh.objects if o["kind"] == "Deployment")
    args = ctrl["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--slurm=scontrol" in args
    assert rb.suite_params["slurm"]["drain_reason_prefix"] == "gpu-health:"
    assert "--slurm-reason-prefix=gpu-health:" in args


def test_nodeset_gres_count_differing_from_its_shape_fails(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _add_profile(repo_copy, "        slurm:\n          nodesets:\n"
                            "            h100: {enabled: true, replicas: 2, shape: h100-80gb-x8, gpu: {type: h100, count: 4}}\n")
    rc = main(["--catalog-dir", str(repo_copy), "validate", "slurm@0.1.0", "--profile", "broken", "--no-lint"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "slurm.nodeset-gres" in err and "NodeSet/h100" in err and "spec.extraConf" in err
    assert "count 4 differs from node shape h100-80gb-x8's 8 GPUs" in err


def test_partition_naming_a_missing_nodeset_fails(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _add_profile(repo_copy, "        slurm:\n          partitions:\n"
                            "            batch: {nodesets: [h100, a100], priorityTier: 1, default: true}\n")
    rc = main(["--catalog-dir", str(repo_copy), "validate", "slurm@0.1.0", "--profile", "broken", "--no-lint"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "slurm.partition-nodeset" in err and "partition/batch" in err and "Nodes" in err and "'a100'" in err


def test_unsupported_slurm_version_fails(repo_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _add_profile(repo_copy, '        slurm:\n          slurmVersion: "24.05"\n'
                            "          image: {tag: 24.05-ubuntu24.04}\n")
    rc = main(["--catalog-dir", str(repo_copy), "validate", "slurm@0.1.0", "--profile", "broken", "--no-lint"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "slurm.version" in err and "Controller/slurm" in err
    assert "metadata.annotations.gpucatalog.io/slurm-version" in err and "spec.slurmd.image" in err
    assert "Slurm 24.05 is not supported" in err


def test_operator_off_the_supported_line_is_refused_by_its_values_schema(
    repo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _add_profile(repo_copy, '        slurm-operator:\n          image: {tag: "1.1.2"}\n')
    rc = main(["--catalog-dir", str(repo_copy), "validate", "slurm@0.1.0", "--profile", "broken", "--no-lint"])
    err = capsys.readouterr().err
    assert rc == 2  # bad input: the chart's values.schema.json pins the 1.2.x line
    assert "image" in err and "tag" in err and "1.1.2" in err
