"""team-queues rendered for Kueue (``stack: kueue``): the same spec as the KAI rendering becomes
ResourceFlavors, hierarchical Cohorts, ClusterQueues and LocalQueues with the numbers the spec
means, and every field Kueue cannot honour is refused by name (and the KAI side refuses the
Kueue-only field)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.validators.static import kueue_rules
from tests.conftest import CHARTS, RenderChart

KUEUE = {"stack": "kueue"}
H100 = "NVIDIA-H100-80GB-HBM3"


def _kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _gpu(obj: dict[str, Any]) -> dict[str, Any]:
    (group,) = obj["spec"]["resourceGroups"]
    (flavor,) = group["flavors"]
    (quota,) = flavor["resources"]
    return {"flavor": flavor["name"], **quota}


def _spec(*departments: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"stack": "kueue", "departments": list(departments), **extra}


def test_default_spec_renders_cohorts_cluster_queues_and_local_queues(render_chart: RenderChart) -> None:
    docs = render_chart("team-queues", KUEUE)
    assert not [d for d in docs if d["kind"] == "Queue"]  # no KAI objects
    flavors = _kind(docs, "ResourceFlavor")
    assert {n: f["spec"]["nodeLabels"] for n, f in flavors.items()} == {"h100-80gb": {"nvidia.com/gpu.product": H100}}
    cohorts = _kind(docs, "Cohort")
    assert cohorts["research"]["spec"]["parentName"] == "all-departments"
    assert cohorts["all-departments"]["spec"] == {}
    # children guarantee all of research's 8 GPUs: the cohort holds no quota of its own
    assert "resourceGroups" not in cohorts["research"]["spec"]
    cqs = _kind(docs, "ClusterQueue")
    assert set(cqs) == {"vision", "language", "serving"}
    assert cqs["vision"]["spec"]["cohortName"] == "research"
    assert _gpu(cqs["vision"]) == {"flavor": "h100-80gb", "name": "nvidia.com/gpu", "nominalQuota": 4}
    assert cqs["language"]["spec"]["fairSharing"] == {"weight": "2"}
    assert cqs["vision"]["spec"]["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
    # serving is non-preemptible: it never borrows, so its work is never reclaimed
    assert _gpu(cqs["serving"])["borrowingLimit"] == 0
    assert cqs["serving"]["spec"]["preemption"]["withinClusterQueue"] == "Never"
    assert cqs["serving"]["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "serving"}}
    lqs = {(d["metadata"]["namespace"], d["metadata"]["name"]): d["spec"] for d in docs if d["kind"] == "LocalQueue"}
    assert lqs[("vision", "vision")] == {"clusterQueue": "vision"}
    assert set(_kind(docs, "Namespace")) == {"vision", "language", "serving"}
    # PriorityClasses are shared: Kueue takes a workload's priority from them too
    assert set(_kind(docs, "PriorityClass")) == {"train", "build-preemptible", "build", "inference"}


def test_limits_reserved_gpus_and_department_quota_map_to_kueue_limits(render_chart: RenderChart) -> None:
    spec = _spec(
        {"name": "org", "gpu": {"quota": 16, "limit": 24, "overQuotaWeight": 3}},
        {"name": "ml", "parent": "org", "gpu": {"quota": 12, "reserved": 2},
         "teams": [{"name": "a", "gpu": {"quota": 4, "limit": 10}},
                   {"name": "b", "gpu": {"quota": 6, "reserved": 6}}]},
    )
    docs = render_chart("team-queues", spec)
    cohorts = _kind(docs, "Cohort")
    # org: 16 guaranteed, 12 of them to ml: 4 of its own; may grow to its limit of 24
    assert cohorts["org"]["spec"]["parentName"] == "all-departments"
    assert _gpu(cohorts["org"]) == {"flavor": "h100-80gb", "name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 8}
    assert cohorts["org"]["spec"]["fairSharing"] == {"weight": "3"}
    assert cohorts["ml"]["spec"]["parentName"] == "org"
    assert _gpu(cohorts["ml"]) == {"flavor": "h100-80gb", "name": "nvidia.com/gpu", "nominalQuota": 2, "lendingLimit": 10}
    cqs = _kind(docs, "ClusterQueue")
    assert _gpu(cqs["a"]) == {"flavor": "h100-80gb", "name": "nvidia.com/gpu", "nominalQuota": 4, "borrowingLimit": 6}
    assert _gpu(cqs["b"]) == {"flavor": "h100-80gb", "name": "nvidia.com/gpu", "nominalQuota": 6, "lendingLimit": 0}


def test_teams_on_gpu_products_and_namespaces_of_their_own(render_chart: RenderChart) -> None:
    spec = _spec(
        {"name": "d", "gpu": {"quota": 8}, "teams": [{"name": "a", "gpu": {"quota": 4}}, {"name": "b", "gpu": {"quota": 2}}]},
        kueue={"flavors": [{"name": "h100", "gpuProduct": H100}, {"name": "h200", "gpuProduct": "NVIDIA-H200"}],
               "teamFlavors": {"b": "h200"}, "teamNamespaces": {"a": "team-a"}, "createNamespaces": False},
    )
    docs = render_chart("team-queues", spec)
    cqs = _kind(docs, "ClusterQueue")
    assert _gpu(cqs["a"])["flavor"] == "h100" and _gpu(cqs["b"])["flavor"] == "h200"
    # mixed products below d: its own 2 GPUs go on the first flavor
    assert _gpu(_kind(docs, "Cohort")["d"])["flavor"] == "h100"
    assert [(d["metadata"]["namespace"], d["spec"]["clusterQueue"]) for d in docs if d["kind"] == "LocalQueue"] == [
        ("team-a", "a"), ("b", "b")]
    assert not _kind(docs, "Namespace")


# nested-values.yaml has fractional quotas: a KAI-only scenario, refused for Kueue below.
WHOLE_GPU_SCENARIOS = [p for p in sorted((CHARTS / "team-queues/ci").glob("*-values.yaml")) if p.name != "nested-values.yaml"]


@pytest.mark.parametrize("path", WHOLE_GPU_SCENARIOS, ids=lambda p: p.name)
def test_whole_gpu_scenarios_pass_the_static_kueue_rules(render_chart: RenderChart, path: Path) -> None:
    values = yaml.safe_load(path.read_text()) or {}
    docs = render_chart("team-queues", {**values, **KUEUE})
    assert kueue_rules.check(docs, [H100], H100, component="team-queues") == []


# -- refusals -------------------------------------------------------------------------------


def test_fractional_quota_is_refused_for_kueue(render_error: Any) -> None:
    values = yaml.safe_load((CHARTS / "team-queues/ci/nested-values.yaml").read_text())
    err = render_error("team-queues", {**values, **KUEUE})
    assert "departments[1] (research).gpu.quota is 6.5; Kueue counts whole nvidia.com/gpu devices" in err


def test_queue_priority_means_nothing_for_kueue(render_error: Any) -> None:
    err = render_error("team-queues", _spec({"name": "d", "priority": 3, "gpu": {"quota": 1}}))
    assert "departments[0] (d).priority means nothing for Kueue" in err


def test_governed_cpu_is_refused_for_kueue(render_error: Any) -> None:
    spec = _spec({"name": "d", "gpu": {"quota": 2}, "teams": [
        {"name": "t", "gpu": {"quota": 1}, "cpu": {"quota": 8000, "overQuotaWeight": 1, "limit": -1}}]})
    err = render_error("team-queues", spec)
    assert "departments[0].teams[0] (t).cpu governs cpu; the Kueue rendering governs GPUs only" in err


def test_department_limit_over_two_gpu_products_cannot_be_a_cohort(render_error: Any) -> None:
    spec = _spec(
        {"name": "d", "gpu": {"quota": 8, "limit": 12},
         "teams": [{"name": "a", "gpu": {"quota": 4}}, {"name": "b", "gpu": {"quota": 4}}]},
        kueue={"flavors": [{"name": "h100", "gpuProduct": H100}, {"name": "h200", "gpuProduct": "NVIDIA-H200"}],
               "teamFlavors": {"b": "h200"}},
    )
    err = render_error("team-queues", spec)
    assert "departments[0] (d).gpu.limit cannot be expressed as a Kueue cohort: its teams' GPUs are on flavors h100, h200" in err


def test_team_flavor_of_unknown_team_or_flavor_is_refused(render_error: Any) -> None:
    base = {"name": "d", "gpu": {"quota": 1}, "teams": [{"name": "t", "gpu": {"quota": 1}}]}
    err = render_error("team-queues", _spec(base, kueue={"teamFlavors": {"nobody": "h100-80gb"}}))
    assert "kueue.teamFlavors.nobody names no team (known: t)" in err
    err = render_error("team-queues", _spec(base, kueue={"teamFlavors": {"t": "a100"}}))
    assert 'kueue.teamFlavors.t is "a100", which is not in kueue.flavors (known: h100-80gb)' in err


def test_department_named_like_the_root_cohort_is_refused(render_error: Any) -> None:
    err = render_error("team-queues", _spec({"name": "all-departments", "gpu": {"quota": 1}}))
    assert "departments[0] (all-departments).name is kueue.rootCohort" in err


def test_reserved_above_quota_is_refused_on_both_stacks(render_error: Any) -> None:
    for stack in ("kai", "kueue"):
        err = render_error("team-queues", {"stack": stack, "departments": [{"name": "d", "gpu": {"quota": 2, "reserved": 3}}]})
        assert "departments[0] (d).gpu.reserved (3) is above its quota (2)" in err


def test_reserved_means_nothing_for_kai(render_error: Any) -> None:
    err = render_error("team-queues", {"departments": [
        {"name": "d", "gpu": {"quota": 2}, "teams": [{"name": "t", "gpu": {"quota": 2, "reserved": 1}}]}]})
    assert "departments[0].teams[0] (t).gpu.reserved means nothing for KAI Scheduler" in err


def test_unknown_stack_is_refused_by_the_schema(render_error: Any) -> None:
    err = render_error("team-queues", {"stack": "volcano"})
    assert "/stack" in err and "'kai', 'kueue'" in err
