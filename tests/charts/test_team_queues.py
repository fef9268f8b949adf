"""team-queues: real `helm template` renders of the team spec, and every rejection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.validators.static import kai_rules
from tests.conftest import CHARTS, RenderChart

SKIP_SCHEMA = "--skip-schema-validation"


def _queues(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Queue"}


def _spec(*departments: dict[str, Any]) -> dict[str, Any]:
    return {"departments": list(departments)}


def test_defaults_render_hierarchical_queues_and_kai_priority_classes(render_chart: RenderChart) -> None:
    docs = render_chart("team-queues")
    queues = _queues(docs)
    assert set(queues) == {"research", "vision", "language", "production", "serving"}
    for q in queues.values():
        assert q["apiVersion"] == "scheduling.run.ai/v2"
        # KAI has no defaulting for these: every resource carries all three fields.
        for res in ("gpu", "cpu", "memory"):
            assert set(q["spec"]["resources"][res]) == {"quota", "overQuotaWeight", "limit"}
    assert "parentQueue" not in queues["research"]["spec"]
    assert queues["vision"]["spec"]["parentQueue"] == "research"
    assert queues["language"]["spec"]["resources"]["gpu"] == {"quota": 4, "overQuotaWeight": 2, "limit": -1}
    assert queues["serving"]["spec"]["resources"]["gpu"]["limit"] == 8
    assert queues["serving"]["metadata"]["labels"]["gpu-catalog.dev/default-preemptibility"] == "non-preemptible"
    assert queues["serving"]["metadata"]["annotations"]["gpu-catalog.dev/default-priority-class"] == "inference"
    assert queues["vision"]["metadata"]["annotations"]["gpu-catalog.dev/default-priority-class"] == "train"
    assert queues["vision"]["spec"]["resources"]["cpu"] == {"quota": -1, "overQuotaWeight": 1, "limit": -1}
    classes = {d["metadata"]["name"]: d["value"] for d in docs if d["kind"] == "PriorityClass"}
    assert classes == {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


def test_nested_departments_fractions_and_large_numbers(render_chart: RenderChart) -> None:
    values = yaml.safe_load((CHARTS / "team-queues/ci/nested-values.yaml").read_text())
    queues = _queues(render_chart("team-queues", values))
    assert queues["research"]["spec"]["parentQueue"] == "org"
    assert queues["vision"]["spec"]["parentQueue"] == "research"
    assert queues["vision"]["spec"]["resources"]["gpu"] == {"quota": 2.5, "overQuotaWeight": 1, "limit": 4}
    # 10^6 MB must stay a number (not 1e+06, which YAML reads as a string).
    assert queues["vision"]["spec"]["resources"]["memory"]["quota"] == 1000000
    # Defaults fill what a department leaves out.
    assert queues["ops"]["spec"]["resources"]["gpu"] == {"quota": 3.5, "overQuotaWeight": 1, "limit": -1}


def test_priority_classes_can_be_left_to_someone_else(render_chart: RenderChart) -> None:
    docs = render_chart("team-queues", {"priorityClasses": {"create": False}})
    assert not [d for d in docs if d["kind"] == "PriorityClass"]


@pytest.mark.parametrize("path", sorted((CHARTS / "team-queues/ci").glob("*-values.yaml")), ids=lambda p: p.name)
def test_ci_scenarios_render(render_chart: RenderChart, path: Path) -> None:
    values = yaml.safe_load(path.read_text()) or {}
    assert _queues(render_chart("team-queues", values))


# -- rejections ---------------------------------------------------------------------------


def test_negative_quota_is_rejected_by_the_schema(render_error: Any) -> None:
    err = render_error("team-queues", _spec({"name": "d", "gpu": {"quota": -2}}))
    assert "/departments/0/gpu/quota" in err and "minimum" in err


def test_negative_quota_is_rejected_at_render_time_without_the_schema(render_error: Any) -> None:
    spec = _spec({"name": "d", "gpu": {"quota": 4}, "teams": [{"name": "t", "gpu": {"quota": -1}}]})
    err = render_error("team-queues", spec, SKIP_SCHEMA)
    assert "departments[0].teams[0] (t).gpu.quota is -1" in err


def test_children_above_parent_quota_are_rejected(render_error: Any) -> None:
    spec = _spec({"name": "d", "gpu": {"quota": 4},
                  "teams": [{"name": "a", "gpu": {"quota": 3}}, {"name": "b", "gpu": {"quota": 2}}]})
    err = render_error("team-queues", spec)
    assert "the children of d guarantee 5 GPUs (a=3, b=2) but d.gpu.quota is 4" in err


def test_child_departments_count_toward_the_parent(render_error: Any) -> None:
    spec = _spec({"name": "org", "gpu": {"quota": 4}},
                 {"name": "infra", "parent": "org", "gpu": {"quota": 3}},
                 {"name": "ml", "parent": "org", "gpu": {"quota": 1.5}})
    err = render_error("team-queues", spec)
    assert "the children of org guarantee 4.5 GPUs" in err


def test_unknown_parent_is_rejected(render_error: Any) -> None:
    spec = _spec({"name": "d", "parent": "nowhere", "gpu": {"quota": 1}})
    err = render_error("team-queues", spec)
    assert 'departments[0] (d).parent "nowhere" names no department (known: d)' in err


def test_a_team_cannot_be_a_parent(render_error: Any) -> None:
    spec = _spec({"name": "d", "gpu": {"quota": 1}, "teams": [{"name": "t", "gpu": {"quota": 1}}]},
                 {"name": "e", "parent": "t", "gpu": {"quota": 0}})
    err = render_error("team-queues", spec)
    assert 'parent "t" is a team' in err


def test_a_cycle_is_rejected(render_error: Any) -> None:
    spec = _spec({"name": "a", "parent": "c", "gpu": {"quota": 1}},
                 {"name": "b", "parent": "a", "gpu": {"quota": 1}},
                 {"name": "c", "parent": "b", "gpu": {"quota": 1}})
    err = render_error("team-queues", spec)
    assert "departments form a cycle through parent: a -> c -> b -> a" in err


def test_a_self_parent_is_a_cycle(render_error: Any) -> None:
    err = render_error("team-queues", _spec({"name": "a", "parent": "a", "gpu": {"quota": 1}}))
    assert "cycle through parent: a -> a" in err


def test_limit_below_quota_is_rejected(render_error: Any) -> None:
    spec = _spec({"name": "d", "gpu": {"quota": 4, "limit": 2}})
    err = render_error("team-queues", spec)
    assert "departments[0] (d).gpu.limit (2) is below its quota (4)" in err


def test_duplicate_queue_names_are_rejected(render_error: Any) -> None:
    spec = _spec({"name": "d", "gpu": {"quota": 2}, "teams": [{"name": "d", "gpu": {"quota": 1}}]})
    err = render_error("team-queues", spec)
    assert 'teams[0].name "d" is already used by another queue' in err


def test_unknown_field_is_rejected_by_the_schema(render_error: Any) -> None:
    spec = _spec({"name": "d", "gpu": {"quota": 2, "guaranteed": 1}})
    err = render_error("team-queues", spec)
    assert "guaranteed" in err and "additional properties" in err


@pytest.mark.parametrize("path", sorted((CHARTS / "team-queues/ci").glob("*-values.yaml")), ids=lambda p: p.name)
def test_rendered_queues_pass_the_static_kai_rules(render_chart: RenderChart, path: Path) -> None:
    docs = render_chart("team-queues", yaml.safe_load(path.read_text()) or {})
    assert kai_rules.check_queues(docs, component="team-queues") == []


def test_integers_from_set_flags_are_checked_too(render_error: Any) -> None:
    # --set gives int64 values, a file gives float64: the checks must compare both.
    err = render_error("team-queues", None, "--set",
                       "departments[0].name=d,departments[0].gpu.quota=4,"
                       "departments[0].teams[0].name=t,departments[0].teams[0].gpu.quota=5")
    assert "the children of d guarantee 5 GPUs (t=5) but d.gpu.quota is 4" in err
