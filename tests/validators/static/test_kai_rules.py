"""Static KAI queue rules: each rule fires on the spec KAI would reject, and a good tree is clean."""

from __future__ import annotations

from typing import Any

import pytest

from gpucatalog.core import errors
from gpucatalog.validators.static import kai_rules


def q(name: str, parent: str = "", gpu: Any = (1, 1, -1), **res: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {}}
    for key, val in {"gpu": gpu, **res}.items():
        if isinstance(val, tuple):
            spec["resources"][key] = dict(zip(("quota", "overQuotaWeight", "limit"), val, strict=True))
        else:
            spec["resources"][key] = val
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def rules(objs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(f.rule, f.obj, f.field) for f in kai_rules.check_queues(objs, component="team-queues")]


def test_a_sound_hierarchy_has_no_findings() -> None:
    objs = [q("dept", gpu=(8, 1, -1)), q("a", "dept", gpu=(4, 1, -1)), q("b", "dept", gpu=(0.1, 2, 8)),
            q("c", "dept", gpu=(0.2, 1, -1)), q("unl", gpu=(-1, 1, -1)), q("u1", "unl", gpu=(-1, 1, -1)),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]
    assert rules(objs) == []
    kai_rules.require_valid_queues(objs)


def test_limit_below_quota() -> None:
    assert rules([q("a", gpu=(4, 1, 2))]) == [("kai-queue-limit-below-quota", "Queue/a", "spec.resources.gpu.limit")]


@pytest.mark.parametrize("gpu,field", [((-2, 1, -1), "quota"), ((1, -0.5, -1), "overQuotaWeight"),
                                       ((1, 1, -3), "limit")])
def test_negative_values(gpu: Any, field: str) -> None:
    assert rules([q("a", gpu=gpu)]) == [("kai-queue-negative", "Queue/a", f"spec.resources.gpu.{field}")]


def test_unknown_parent_names_the_known_queues() -> None:
    (finding,) = kai_rules.check_queues([q("a", "ghost")])
    assert (finding.rule, finding.field) == ("kai-queue-unknown-parent", "spec.parentQueue")
    assert "'ghost'" in finding.message and "known: a" in finding.message


def test_cycle_is_reported_once_with_its_path() -> None:
    found = kai_rules.check_queues([q("a", "c"), q("b", "a"), q("c", "b"), q("d", "a")])
    cycles = [f for f in found if f.rule == "kai-queue-cycle"]
    assert len(cycles) == 1 and cycles[0].message == "parents form a cycle: a -> c -> b -> a"


def test_children_over_parent_per_resource() -> None:
    objs = [q("p", gpu=(4, 1, -1), cpu=(1000, 1, -1)), q("a", "p", gpu=(3, 1, -1), cpu=(1000, 1, -1)),
            q("b", "p", gpu=(1.5, 1, -1), cpu=(-1, 1, -1))]
    found = {(f.rule, f.field): f.message for f in kai_rules.check_queues(objs)}
    assert found[("kai-queue-children-over-parent", "spec.resources.gpu.quota")] == (
        "children guarantee 4.5 gpu (a=3, b=1.5) but the parent's quota is 4")
    assert "children b have unlimited cpu quota" in found[("kai-queue-children-over-parent", "spec.resources.cpu.quota")]


def test_fractional_children_summing_exactly_to_the_parent_pass() -> None:
    objs = [q("p", gpu=(0.3, 1, -1)), q("a", "p", gpu=(0.1, 1, -1)), q("b", "p", gpu=(0.2, 1, -1))]
    assert rules(objs) == []


def test_missing_resources_fields_and_non_numbers() -> None:
    no_res = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "n"}, "spec": {}}
    partial = q("p", gpu={"quota": 1, "overQuotaWeight": 1})
    text = q("t", gpu={"quota": "4", "overQuotaWeight": True, "limit": -1})
    assert rules([no_res, partial, text]) == [
        ("kai-queue-resources", "Queue/n", "spec.resources"),
        ("kai-queue-field", "Queue/p", "spec.resources.gpu.limit"),
        ("kai-queue-number", "Queue/t", "spec.resources.gpu.quota"),
        ("kai-queue-number", "Queue/t", "spec.resources.gpu.overQuotaWeight"),
    ]


def test_duplicates_and_require_raises_check_failed() -> None:
    with pytest.raises(errors.CheckFailed) as info:
        kai_rules.require_valid_queues([q("a"), q("a")], component="team-queues")
    (finding,) = info.value.findings
    assert finding.rule == "kai-queue-duplicate" and finding.component == "team-queues"
    assert str(finding) == "[kai-queue-duplicate] team-queues/Queue/a metadata.name: defined twice; queues are cluster-scoped"
