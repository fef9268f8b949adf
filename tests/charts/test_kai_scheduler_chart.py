"""kai-scheduler (thin chart, one folder per KAI release): pinned images, least-privilege RBAC,
requests, values schema, and the CRDs written here (a Queue with a wrong field fails their
schema). Every check runs on each release's chart."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import CHARTS, RenderChart

# chart folder -> the KAI release it deploys
RELEASES = {"kai-scheduler": "v0.16.8", "kai-scheduler-v0.17.0": "v0.17.0"}
REGISTRY = "ghcr.io/kai-scheduler/kai-scheduler"


@pytest.fixture(params=sorted(RELEASES))
def chart(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def _config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (cfg,) = _by_kind(docs, "Config")
    return cfg


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD's structural schema as JSON Schema with unknown fields rejected: the API server
    prunes them silently, so a validator must treat every object that lists properties (and
    does not preserve unknown fields) as closed."""
    out = copy.deepcopy(schema)
    out.pop("x-kubernetes-int-or-string", None)
    if "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
        out["properties"] = {k: closed(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = closed(out["items"])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = closed(out["additionalProperties"])
    if out.get("nullable"):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


def crd_validator(chart: str, name: str) -> jsonschema.Draft202012Validator:
    crd = yaml.safe_load((CHARTS / chart / "crds" / name).read_text())
    (version,) = crd["spec"]["versions"]
    return jsonschema.Draft202012Validator(closed(version["schema"]["openAPIV3Schema"]))


def test_every_image_is_pinned_to_the_kai_release(render_chart: RenderChart, chart: str) -> None:
    docs = render_chart(chart)
    (operator,) = _by_kind(docs, "Deployment")
    (container,) = operator["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{REGISTRY}/operator:{RELEASES[chart]}"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MS_REPOSITORY"] == REGISTRY and env["MS_TAG"] == RELEASES[chart]
    spec = _config(docs)["spec"]
    images = {(s["service"]["image"]["name"], s["service"]["image"]["tag"], s["service"]["image"]["repository"])
              for k, s in spec.items() if isinstance(s, dict) and "image" in s.get("service", {})}
    rr = spec["binder"]["resourceReservation"]["image"]
    images.add((rr["name"], rr["tag"], rr["repository"]))
    assert {i[0] for i in images} == {"scheduler", "binder", "admission", "podgrouper", "podgroupcontroller",
                                      "queuecontroller", "resourcereservation"}
    assert {i[1] for i in images} == {RELEASES[chart]} and {i[2] for i in images} == {REGISTRY}


def test_operator_args_and_namespace(render_chart: RenderChart, chart: str) -> None:
    docs = render_chart(chart)
    (operator,) = _by_kind(docs, "Deployment")
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    # KAI's operator defaults --namespace to runai-engine; it must be the release namespace.
    # (the test renders into a namespace named like the chart folder)
    assert f"--namespace={chart}" in args and "--leader-elect=false" in args
    assert _config(docs)["spec"]["namespace"] == chart


def test_rbac_has_no_wildcards_and_writes_leases_only_locally(render_chart: RenderChart, chart: str) -> None:
    docs = render_chart(chart)
    roles = _by_kind(docs, "ClusterRole") + _by_kind(docs, "Role")
    assert roles
    for role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(key, []), (role["metadata"]["name"], rule)
    for role in _by_kind(docs, "ClusterRole"):
        for rule in role["rules"]:
            assert "leases" not in rule["resources"], role["metadata"]["name"]
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
    bound = {(b["roleRef"]["name"], b["subjects"][0]["name"])
             for b in _by_kind(docs, "ClusterRoleBinding") + _by_kind(docs, "RoleBinding")}
    # The ServiceAccount names KAI's operator gives its components.
    for role, sa in [("kai-scheduler", "scheduler"), ("kai-binder", "binder"), ("kai-admission", "admission"),
                     ("kai-podgrouper", "pod-grouper"), ("kai-podgroupcontroller", "podgroup-controller"),
                     ("kai-queuecontroller", "queue-controller"), ("kai-operator", "kai-operator"),
                     ("kai-resource-reservation", "kai-resource-reservation")]:
        assert (role, sa) in bound


def test_operator_manages_the_reservation_service_account_and_nothing_else_there(render_chart: RenderChart, chart: str) -> None:
    """KAI v0.16.8's binder operand puts ServiceAccount kai-resource-reservation into the
    operator's desired state (created, taken over by update, deleted); a hand run with real KAI
    was denied ("serviceaccounts is forbidden") without this Role."""
    docs = render_chart(chart, values={"resourceReservation": {"namespace": "rr-elsewhere"}})
    roles = [r for r in _by_kind(docs, "Role") if r["metadata"]["namespace"] == "rr-elsewhere"]
    operator_roles = [r for r in roles if r["metadata"]["name"] == "kai-operator-reservation"]
    assert [r["rules"] for r in operator_roles] == [[{"apiGroups": [""], "resources": ["serviceaccounts"],
                                                      "verbs": ["create", "update", "delete"]}]]
    (binding,) = [b for b in _by_kind(docs, "RoleBinding") if b["metadata"]["name"] == "kai-operator-reservation"]
    assert binding["metadata"]["namespace"] == "rr-elsewhere"
    assert binding["roleRef"]["name"] == "kai-operator-reservation"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kai-operator", "namespace": chart}]
    config = _config(docs)["spec"]
    assert config["binder"]["resourceReservation"]["namespace"] == "rr-elsewhere"


def test_podgrouper_owner_rules_come_from_values(render_chart: RenderChart, chart: str) -> None:
    values = yaml.safe_load((CHARTS / chart / "ci/kubeflow-values.yaml").read_text())
    docs = render_chart(chart, values)
    (grouper,) = [r for r in _by_kind(docs, "ClusterRole") if r["metadata"]["name"] == "kai-podgrouper"]
    kubeflow = [r for r in grouper["rules"] if r["apiGroups"] == ["kubeflow.org"]]
    assert {"pytorchjobs", "mpijobs"} <= set(kubeflow[0]["resources"])
    assert kubeflow[1]["resources"] == ["pytorchjobs/finalizers", "mpijobs/finalizers"]
    shard = _by_kind(docs, "SchedulingShard")[0]
    assert shard["spec"]["placementStrategy"] == {"gpu": "spread", "cpu": "spread"}
    assert shard["spec"]["args"] == {"schedule-period": "500ms"}


def test_every_workload_and_component_sets_resource_requests(render_chart: RenderChart, chart: str) -> None:
    docs = render_chart(chart)
    for dep in _by_kind(docs, "Deployment"):
        for c in dep["spec"]["template"]["spec"]["containers"]:
            assert {"cpu", "memory"} <= set(c["resources"]["requests"])
    spec = _config(docs)["spec"]
    for key in ("scheduler", "binder", "admission", "podGrouper", "podGroupController", "queueController"):
        assert {"cpu", "memory"} <= set(spec[key]["service"]["resources"]["requests"]), key


def test_gpu_sharing_follows_values(render_chart: RenderChart, chart: str) -> None:
    assert _config(render_chart(chart))["spec"]["admission"]["gpuSharing"] is True
    off = yaml.safe_load((CHARTS / chart / "ci/sharing-off-values.yaml").read_text())
    assert _config(render_chart(chart, off))["spec"]["admission"]["gpuSharing"] is False


def test_crds_are_installed_with_the_chart(render_chart: RenderChart, chart: str) -> None:
    docs = render_chart(chart, None, "--include-crds")
    names = {d["metadata"]["name"] for d in _by_kind(docs, "CustomResourceDefinition")}
    assert names == {"queues.scheduling.run.ai", "podgroups.scheduling.run.ai", "bindrequests.scheduling.run.ai",
                     "configs.kai.scheduler", "schedulingshards.kai.scheduler", "topologies.kai.scheduler"}


@pytest.mark.parametrize("values,needle", [
    ({"kai": {"version": "latest"}}, "/kai/version"),
    ({"components": {"binder": {"enabled": True, "resources": {"requests": None}}}}, "requests"),
    ({"scheduler": {"placementStrategy": "random"}}, "/scheduler/placementStrategy"),
    ({"podGrouper": {"extraOwnerRules": [{"apiGroups": ["*"], "resources": ["jobs"]}]}}, "extraOwnerRules"),
    ({"gpuSharin": True}, "gpuSharin"),
])
def test_values_schema_rejects_bad_values(render_error: Any, values: dict[str, Any], needle: str, chart: str) -> None:
    assert needle in render_error(chart, values)


@pytest.mark.parametrize("path", sorted(p for c in RELEASES for p in (CHARTS / c / "ci").glob("*-values.yaml")),
                         ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_ci_scenarios_render(render_chart: RenderChart, path: Path) -> None:
    assert _by_kind(render_chart(path.parent.parent.name, yaml.safe_load(path.read_text()) or {}), "Config")


# -- the CRDs' schemas ----------------------------------------------------------------------


def test_team_queues_output_is_valid_against_the_queue_crd(render_chart: RenderChart, chart: str) -> None:
    validator = crd_validator(chart, "scheduling.run.ai_queues.yaml")
    queues = [d for d in render_chart("team-queues") if d["kind"] == "Queue"]
    for q in queues:
        assert not list(validator.iter_errors(q)), q["metadata"]["name"]


def test_a_queue_with_a_wrong_field_is_rejected(chart: str) -> None:
    validator = crd_validator(chart, "scheduling.run.ai_queues.yaml")
    good = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "q"},
            "spec": {"parentQueue": "p", "resources": {"gpu": {"quota": 1, "overQuotaWeight": 1, "limit": -1}}}}
    assert not list(validator.iter_errors(good))
    typo = copy.deepcopy(good)
    typo["spec"]["resources"]["gpu"]["quotta"] = 2
    errors = [e.message for e in validator.iter_errors(typo)]
    assert any("quotta" in m for m in errors)
    misplaced = copy.deepcopy(good)
    misplaced["spec"]["parent"] = "p"
    assert any("'parent'" in e.message for e in validator.iter_errors(misplaced))
    missing = copy.deepcopy(good)
    del missing["spec"]["resources"]["gpu"]["limit"]
    assert any("'limit' is a required property" in e.message for e in validator.iter_errors(missing))


def test_podgroup_and_bindrequest_crds_accept_kai_objects(chart: str) -> None:
    pg = crd_validator(chart, "scheduling.run.ai_podgroups.yaml")
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "g"},
             "spec": {"minMember": 4, "queue": "team-a", "priorityClassName": "train",
                      "preemptibility": "preemptible",
                      "subGroups": [{"name": "workers", "minMember": 3}]}}
    assert not list(pg.iter_errors(group))
    bad = copy.deepcopy(group)
    bad["spec"]["minMember"] = 0
    bad["spec"]["preemptibility"] = "sometimes"
    assert len(list(pg.iter_errors(bad))) == 2
    br = crd_validator(chart, "scheduling.run.ai_bindrequests.yaml")
    req = {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest", "metadata": {"name": "b"},
           "spec": {"podName": "p", "selectedNode": "n1", "receivedResourceType": "Fraction",
                    "receivedGPU": {"count": 1, "portion": "0.5"}, "selectedGPUGroups": ["g1"]},
           "status": {"phase": "Succeeded"}}
    assert not list(br.iter_errors(req))


def test_rendered_config_and_shard_match_their_crds(render_chart: RenderChart, chart: str) -> None:
    docs = render_chart(chart)
    assert not list(crd_validator(chart, "kai.scheduler_configs.yaml").iter_errors(_config(docs)))
    shard = _by_kind(docs, "SchedulingShard")[0]
    assert not list(crd_validator(chart, "kai.scheduler_schedulingshards.yaml").iter_errors(shard))


def test_runtime_class_is_always_explicit(render_chart: RenderChart, chart: str) -> None:
    # KAI's operator defaults an absent gpuFractionRuntimeClassName to "nvidia"; "" disables it.
    assert _config(render_chart(chart))["spec"]["admission"]["gpuFractionRuntimeClassName"] == "nvidia"
    values = yaml.safe_load((CHARTS / chart / "ci/sim-values.yaml").read_text())
    admission = _config(render_chart(chart, values))["spec"]["admission"]
    assert admission["gpuFractionRuntimeClassName"] == ""
    assert admission["gpuSharing"] is True


# -- what v0.17.0 adds ----------------------------------------------------------------------


def test_v0_17_podgroup_takes_a_preemption_delay_and_v0_16_prunes_it() -> None:
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": {"name": "g"},
             "spec": {"minMember": 2, "queue": "team-a", "preemptionDelay": "90s", "stalenessGracePeriod": "5m"}}
    assert not list(crd_validator("kai-scheduler-v0.17.0", "scheduling.run.ai_podgroups.yaml").iter_errors(group))
    old = [e.message for e in crd_validator("kai-scheduler", "scheduling.run.ai_podgroups.yaml").iter_errors(group)]
    assert any("preemptionDelay" in m for m in old)


def test_v0_17_topology_levels_take_an_alias() -> None:
    topo = {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": "cloud.provider.com/rack", "alias": "rack"}]}}
    assert not list(crd_validator("kai-scheduler-v0.17.0", "kai.scheduler_topologies.yaml").iter_errors(topo))
    topo["spec"]["levels"][0]["alias"] = ""
    assert list(crd_validator("kai-scheduler-v0.17.0", "kai.scheduler_topologies.yaml").iter_errors(topo))


def test_v0_17_priority_class_reaches_the_operator_and_the_config(render_chart: RenderChart) -> None:
    docs = render_chart("kai-scheduler-v0.17.0", {"priorityClassName": "system-cluster-critical"})
    (operator,) = _by_kind(docs, "Deployment")
    assert operator["spec"]["template"]["spec"]["priorityClassName"] == "system-cluster-critical"
    assert _config(docs)["spec"]["global"]["priorityClassName"] == "system-cluster-critical"
    assert "priorityClassName" not in _by_kind(render_chart("kai-scheduler-v0.17.0"), "Deployment")[0]["spec"]["template"]["spec"]


def test_v0_17_binder_may_create_resource_claims_and_the_grouper_read_kartas(render_chart: RenderChart) -> None:
    """From v0.17.0's RBAC markers: the binder creates and deletes the ResourceClaims behind
    DRA-backed extended resources; the pod-grouper's Karta fallback reads run.ai kartas."""
    def rules(chart: str, role: str) -> list[dict[str, Any]]:
        (r,) = [r for r in _by_kind(render_chart(chart), "ClusterRole") if r["metadata"]["name"] == role]
        return list(r["rules"])

    def verbs(rs: list[dict[str, Any]], group: str, resource: str) -> set[str]:
        return {v for r in rs if group in r["apiGroups"] and resource in r["resources"] for v in r["verbs"]}

    assert {"create", "delete"} <= verbs(rules("kai-scheduler-v0.17.0", "kai-binder"), "resource.k8s.io", "resourceclaims")
    assert not {"create", "delete"} & verbs(rules("kai-scheduler", "kai-binder"), "resource.k8s.io", "resourceclaims")
    assert verbs(rules("kai-scheduler-v0.17.0", "kai-podgrouper"), "run.ai", "kartas") == {"get", "list", "watch"}


def test_v0_17_bindrequest_keeps_the_extended_resource_claim_allocation() -> None:
    """A field v0.16.8's schema would prune (the API server drops unknown fields silently)."""
    req = {"apiVersion": "scheduling.run.ai/v1alpha2", "kind": "BindRequest", "metadata": {"name": "b"},
           "spec": {"podName": "p", "selectedNode": "n1",
                    "extendedResourceClaimAllocation": {"deviceRequests": [{"name": "gpu"}]}}}
    assert not list(crd_validator("kai-scheduler-v0.17.0", "scheduling.run.ai_bindrequests.yaml").iter_errors(req))
    assert list(crd_validator("kai-scheduler", "scheduling.run.ai_bindrequests.yaml").iter_errors(req))
