"""kueue chart 0.2.0 (``charts/kueue-chart-v0.2.0``): chart 0.1.0's objects unchanged by default,
and the pod, deployment and statefulset integrations as values, each with exactly its webhooks
and RBAC; what Kueue would refuse or mishandle is refused at render time. Live: the main job
(its RBAC proven by Kueue's log) and ``make upstream-e2e``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.charts.test_kueue_chart import NO_CRDS, _config, _one, _rules
from tests.conftest import CHARTS, RenderChart

CHART = "kueue-chart-v0.2.0"
ALL = {**NO_CRDS, "manager": {"integrations": ["batch/job", "pod", "deployment", "statefulset"]}}


def _render(render_chart: RenderChart, values: dict[str, Any]) -> list[dict[str, Any]]:
    """Rendered as release kueue in namespace kueue, as chart 0.1.0's tests render it."""
    return [_named_kueue(d) for d in render_chart(CHART, values, "--namespace", "kueue")]


def _named_kueue(doc: dict[str, Any]) -> dict[str, Any]:
    labels = doc["metadata"].get("labels") or {}
    if labels.get("app.kubernetes.io/instance") == CHART:
        labels["app.kubernetes.io/instance"] = "kueue"
    return doc


def _strip_chart_label(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for d in docs:
        (d["metadata"].get("labels") or {}).pop("helm.sh/chart", None)
        (((d.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}).pop("helm.sh/chart", None)
        annotations = ((d.get("spec") or {}).get("template") or {}).get("metadata", {}).get("annotations") or {}
        annotations.pop("checksum/config", None)  # a checksum over labelled objects
    return docs


def test_the_defaults_render_chart_0_1_0s_objects(render_chart: RenderChart) -> None:
    assert _strip_chart_label(_render(render_chart, NO_CRDS)) == _strip_chart_label(render_chart("kueue", NO_CRDS))


def test_each_integration_brings_its_webhooks_outside_unmanaged_namespaces(render_chart: RenderChart) -> None:
    docs = _render(render_chart, ALL)
    assert _config(docs)["integrations"]["frameworks"] == ["batch/job", "pod", "deployment", "statefulset"]
    mutating = {w["name"]: w for w in _one(docs, "MutatingWebhookConfiguration")["webhooks"]}
    validating = {w["name"]: w for w in _one(docs, "ValidatingWebhookConfiguration")["webhooks"]}
    # the paths Kueue v0.17.0 serves them on
    for name, path, group, resource in [("pod", "-v1-pod", "", "pods"),
                                        ("deployment", "apps-v1-deployment", "apps", "deployments"),
                                        ("statefulset", "apps-v1-statefulset", "apps", "statefulsets")]:
        for w, verb in ((mutating[f"m{name}.kb.io"], "mutate"), (validating[f"v{name}.kb.io"], "validate")):
            assert w["clientConfig"]["service"]["path"] == f"/{verb}-{path}"
            assert w["rules"][0]["apiGroups"] == [group] and w["rules"][0]["resources"] == [resource]
            # never Kueue's own pods nor the control plane's: a pod webhook that fails closed
            assert w["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue"]
    assert mutating["mpod.kb.io"]["rules"][0]["operations"] == ["CREATE"]


def test_rbac_grows_by_what_each_integration_reads_and_writes(render_chart: RenderChart) -> None:
    base = set(_rules(render_chart(CHART, NO_CRDS)))
    pod_only = set(_rules(render_chart(CHART, {**NO_CRDS, "manager": {"integrations": ["batch/job", "pod"]}})))
    everything = set(_rules(render_chart(CHART, ALL)))
    assert pod_only - base == {("", "pods", v) for v in ("delete", "get", "list", "patch", "update", "watch")} | {
        ("", "pods/finalizers", "get"), ("", "pods/finalizers", "update"), ("", "pods/status", "get"),
        ("", "pods/status", "patch")}
    assert everything - pod_only == {("apps", r, v) for r in ("deployments", "replicasets", "statefulsets")
                                     for v in ("get", "list", "watch")}
    assert not [r for r in everything if "*" in r or r[1] == "secrets" or (r[0] == "apps" and r[2] not in ("get", "list", "watch"))]


@pytest.mark.parametrize("values, says", [
    ({"manager": {"integrations": ["batch/job", "deployment"]}},
     'manager.integrations[1] is "deployment", which Kueue runs through the pod integration; add "pod"'),
    ({"replicas": 2, "manager": {"leaderElection": False}},
     "replicas is 2 with manager.leaderElection false; more than one manager needs leader election"),
    ({"manager": {"integrations": ["batch/job", "jobset.x-k8s.io/jobset"]}},
     "/manager/integrations/1"),
])
def test_what_kueue_cannot_run_as_asked_is_refused(render_error: Any, values: dict[str, Any], says: str) -> None:
    assert says in render_error(CHART, {**NO_CRDS, **values})


def test_two_electing_managers(render_chart: RenderChart) -> None:
    docs = render_chart(CHART, {**NO_CRDS, "replicas": 2, "manager": {"leaderElection": True}})
    assert _one(docs, "Deployment")["spec"]["replicas"] == 2
    assert _config(docs)["leaderElection"]["leaderElect"] is True


@pytest.mark.parametrize("path", sorted((CHARTS / CHART / "ci").glob("*-values.yaml")), ids=lambda p: p.name)
def test_ci_scenarios_render(render_chart: RenderChart, path: Path) -> None:
    assert _one(render_chart(CHART, yaml.safe_load(path.read_text())), "Deployment")
