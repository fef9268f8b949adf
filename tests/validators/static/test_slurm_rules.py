"""Static slurm rules on the real rendered charts: each bad input yields its finding."""

from __future__ import annotations

from typing import Any

import pytest

from gpucatalog.core import errors
from gpucatalog.validators.static import slurm_rules
from tests.conftest import REPO as ROOT
from tests.conftest import RenderChart
from tests.plugins.slurm_cluster import SHAPES, crds


def _rules(findings: list[Any]) -> set[str]:
    return {f.rule for f in findings}


def test_default_charts_pass_every_rule(render_chart: RenderChart) -> None:
    docs = render_chart("slurm")
    assert slurm_rules.check(docs, SHAPES) == []
    assert slurm_rules.check_crs(crds(), docs) == []
    assert slurm_rules.check_operator(render_chart("slurm-operator")) == []


def test_gres_count_differs_from_node_shape(render_chart: RenderChart) -> None:
    docs = render_chart("slurm", set_json=['nodesets={"h100":{"enabled":true,"replicas":1,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":4}}}'])
    found = [f for f in slurm_rules.check(docs, SHAPES) if f.rule == "slurm.nodeset-gres"]
    assert len(found) == 1
    f = found[0]
    assert (f.component, f.obj, f.field) == ("slurm", "NodeSet/h100", "spec.extraConf")
    assert "4" in f.message and "8" in f.message


def test_gpu_limit_must_match_gres(render_chart: RenderChart) -> None:
    docs = render_chart("slurm")
    for d in docs:
        if d["kind"] == "NodeSet":
            d["spec"]["slurmd"]["resources"]["limits"]["nvidia.com/gpu"] = 2
    found = [f for f in slurm_rules.check(docs, SHAPES) if f.rule == "slurm.nodeset-gpu-limit"]
    assert [(f.obj, f.field) for f in found] == [("NodeSet/h100", "spec.slurmd.resources.limits")]


def test_unknown_shape_is_reported(render_chart: RenderChart) -> None:
    docs = render_chart("slurm", set_json=['nodesets={"b200":{"enabled":true,"replicas":1,"shape":"b200-180gb-x8","gpu":{"type":"b200","count":8}}}', 'partitions={"p":{"nodesets":["b200"],"priorityTier":1}}'])
    assert _rules(slurm_rules.check(docs, SHAPES)) == {"slurm.nodeset-gres"}


def test_partition_naming_missing_nodeset(render_chart: RenderChart) -> None:
    docs = render_chart("slurm", set_json=['partitions={"batch":{"nodesets":["h100","h200"],"priorityTier":1}}'])
    found = slurm_rules.check(docs, SHAPES)
    assert [(f.rule, f.obj, f.field) for f in found] == [("slurm.partition-nodeset", "partition/batch", "Nodes")]
    assert "'h200'" in found[0].message


def test_gres_types_gpu_must_be_set(render_chart: RenderChart) -> None:
    docs = render_chart("slurm", set_json=['controller={"extraConfMap":{"GresTypes":null}}'])
    found = slurm_rules.check(docs, SHAPES)
    assert _rules(found) == {"slurm.gres-types"}
    assert found[0].obj == "Controller/slurm"


def test_tiers_without_requeue_preemption(render_chart: RenderChart) -> None:
    docs = render_chart("slurm", set_json=['controller={"extraConfMap":{"PreemptType":null,"PreemptMode":"CANCEL"}}'])
    msgs = [f.message for f in slurm_rules.check(docs, SHAPES) if f.rule == "slurm.preemption"]
    assert len(msgs) == 2


def test_unsupported_slurm_version(render_chart: RenderChart) -> None:
    docs = render_chart("slurm", set_json=['slurmVersion="22.05"', 'image={"registry":"ghcr.io/slinkyproject","tag":"22.05-ubuntu22.04"}'])
    found = [f for f in slurm_rules.check(docs, SHAPES) if f.rule == "slurm.version"]
    # annotation + slurmctld + slurmd + slurmrestd + slurmdbd images
    assert len(found) == 5
    assert {f.field for f in found} >= {"metadata.annotations.gpucatalog.io/slurm-version", "spec.slurmd.image"}


def test_operator_off_the_supported_line(render_chart: RenderChart) -> None:
    docs = render_chart("slurm-operator")
    for d in docs:
        if d["kind"] == "Deployment":
            d["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/slinkyproject/slurm-operator:1.1.2"
    assert _rules(slurm_rules.check_operator(docs)) == {"slurm.operator-version"}


def test_values_schema_rejects_bad_input_before_render(render_chart: RenderChart) -> None:
    with pytest.raises(errors.ToolError, match="count"):
        render_chart("slurm", set_json=['nodesets={"h100":{"enabled":true,"replicas":1,"shape":"h100-80gb-x8","gpu":{"type":"h100","count":"eight"}}}'])
    with pytest.raises(errors.ToolError, match="tag"):
        render_chart("slurm-operator", set_json=['image={"repository":"ghcr.io/slinkyproject/slurm-operator","tag":"1.1.2"}'])


def test_crd_schema_catches_a_bad_cr(render_chart: RenderChart) -> None:
    docs = render_chart("slurm")
    for d in docs:
        if d["kind"] == "NodeSet":
            d["spec"]["replicas"] = -1
            del d["spec"]["controllerRef"]
    found = slurm_rules.check_crs(crds(), docs)
    assert {(f.rule, f.obj) for f in found} == {("slurm.crd-schema", "NodeSet/h100")}
    assert len(found) == 2


def test_operator_rbac_is_least_privilege(render_chart: RenderChart) -> None:
    docs = render_chart("slurm-operator", set_json=['namespaces=["slurm"]'])
    kinds = [(d["kind"], d["metadata"].get("namespace")) for d in docs if d["kind"] in ("Role", "ClusterRole")]
    # Namespaced operator: workload rules only in the watched namespace; cluster scope only for nodes.
    assert ("ClusterRole", None) in kinds and ("Role", "slurm") in kinds
    cluster_roles = [d for d in docs if d["kind"] == "ClusterRole"]
    assert [r["resources"] for d in cluster_roles for r in d["rules"]] == [["nodes"]]
    for d in docs:
        for rule in d.get("rules", []):
            assert "*" not in rule["verbs"] and "*" not in rule["resources"]
    dep = next(d for d in docs if d["kind"] == "Deployment")
    assert "--namespaces=slurm" in dep["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize("scenario", ["sim-values.yaml", "three-shapes-values.yaml"])
def test_ci_scenarios_render_and_validate(scenario: str, tmp_path: Any, render_chart: RenderChart) -> None:
    import yaml


    values = yaml.safe_load((ROOT / "charts/slurm/ci" / scenario).read_text())
    docs = render_chart("slurm", values)
    assert slurm_rules.check(docs, SHAPES) == []
    assert slurm_rules.check_crs(crds(), docs) == []


def test_operator_ci_scenario(tmp_path: Any, render_chart: RenderChart) -> None:
    import yaml


    values = yaml.safe_load((ROOT / "charts/slurm-operator/ci/namespaced-values.yaml").read_text())
    docs = render_chart("slurm-operator", values)
    assert slurm_rules.check_operator(docs) == []
    args = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--propagated-node-conditions=GpuHealthy" in args


def test_suite_is_registered() -> None:
    from gpucatalog.validators.conformance import SUITES
    from gpucatalog.validators.conformance.slurm import suite as slurm_suite

    assert SUITES["slurm"] == slurm_suite.__name__
