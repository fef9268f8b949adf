"""kueue chart (written here): the manager's Configuration, names Kueue's certificate rotator
derives, webhooks and RBAC for the enabled integrations only, and refusals of what the chart has
no objects for. The CRDs come from the pinned module (``tests/catalog/test_kueue_module.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import CHARTS, RenderChart

NO_CRDS = {"crds": {"install": False, "keep": True}}


def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def _config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    cm = _one(docs, "ConfigMap", "kueue-manager-config")
    cfg: dict[str, Any] = yaml.safe_load(cm["data"]["controller_manager_config.yaml"])
    return cfg


def _rules(docs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    role = _one(docs, "ClusterRole", "kueue-manager-role")
    return [(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]]


def test_configuration_matches_the_objects_the_chart_renders(render_chart: RenderChart) -> None:
    docs = render_chart("kueue", NO_CRDS)
    cfg = _config(docs)
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and cfg["namespace"] == "kueue"
    # Kueue's rotator finds "<base>-{validating,mutating}-webhook-configuration" from the Service name.
    svc = cfg["internalCertManagement"]["webhookServiceName"]
    assert svc.endswith("-webhook-service")
    base = svc.removesuffix("-webhook-service")
    _one(docs, "Service", svc)
    _one(docs, "MutatingWebhookConfiguration", f"{base}-mutating-webhook-configuration")
    _one(docs, "ValidatingWebhookConfiguration", f"{base}-validating-webhook-configuration")
    _one(docs, "Secret", cfg["internalCertManagement"]["webhookSecretName"])
    # The manager reads the file the Deployment mounts, and serves the ports its probes ask.
    dep = _one(docs, "Deployment")
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    config_arg = next(a for a in c["args"] if a.startswith("--config="))
    mount = next(m for m in c["volumeMounts"] if m["name"] == "manager-config")
    assert Path(config_arg.removeprefix("--config=")).parent == Path(mount["mountPath"])
    cert = next(m for m in c["volumeMounts"] if m["name"] == "cert")
    assert cert["mountPath"] == cfg["webhook"]["certDir"]
    assert c["readinessProbe"]["httpGet"]["port"] == int(cfg["health"]["healthProbeBindAddress"].lstrip(":"))
    assert c["image"] == "registry.k8s.io/kueue/kueue:v0.17.0"
    # All-or-nothing and fair sharing on; features without objects or RBAC here off.
    assert cfg["waitForPodsReady"]["timeout"] == "5m" and "enable" not in cfg["waitForPodsReady"]
    assert cfg["fairSharing"]["preemptionStrategies"]
    assert cfg["featureGates"] == {"VisibilityOnDemand": False, "MultiKueue": False, "TopologyAwareScheduling": False}
    assert cfg["managedJobsNamespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue"]


def test_webhooks_cover_kueue_kinds_and_jobs_outside_unmanaged_namespaces(render_chart: RenderChart) -> None:
    docs = render_chart("kueue", NO_CRDS)
    mutating = _one(docs, "MutatingWebhookConfiguration")["webhooks"]
    validating = _one(docs, "ValidatingWebhookConfiguration")["webhooks"]
    assert {w["name"] for w in mutating} == {"mclusterqueue.kb.io", "mresourceflavor.kb.io", "mworkload.kb.io", "mjob.kb.io"}
    assert {w["name"] for w in validating} == {"vclusterqueue.kb.io", "vcohort.kb.io", "vresourceflavor.kb.io",
                                               "vworkload.kb.io", "vjob.kb.io"}
    for w in mutating + validating:
        assert w["clientConfig"]["service"]["name"] == "kueue-webhook-service"
        assert w["sideEffects"] == "None" and w["failurePolicy"] == "Fail"
        job = w["rules"][0]["apiGroups"] == ["batch"]
        assert ("namespaceSelector" in w) == job
        if job:
            assert w["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system", "kueue"]


def test_rbac_is_least_privilege(render_chart: RenderChart) -> None:
    docs = render_chart("kueue", NO_CRDS)
    rules = _rules(docs)
    assert not [r for r in rules if "*" in r]
    # No integration the chart does not enable, no secrets cluster-wide, no pod writes.
    groups = {g for g, _, _ in rules}
    assert not groups & {"kubeflow.org", "ray.io", "jobset.x-k8s.io", "apps", "resource.k8s.io"}
    assert not [r for r in rules if r[1] in ("secrets", "pods")]
    # Updates of webhook configurations and CRDs only for the ones Kueue injects CA bundles into.
    role = _one(docs, "ClusterRole", "kueue-manager-role")
    for rule in role["rules"]:
        if rule["apiGroups"][0] in ("admissionregistration.k8s.io", "apiextensions.k8s.io") and "update" in rule["verbs"]:
            assert rule["resourceNames"]
    ns_role = _one(docs, "Role", "kueue-manager-namespace-role")
    secret_update = next(r for r in ns_role["rules"] if r["resources"] == ["secrets"] and "update" in r["verbs"])
    assert secret_update["resourceNames"] == ["kueue-webhook-server-cert"]


def test_metrics_off_drops_its_service_and_rbac(render_chart: RenderChart) -> None:
    values = yaml.safe_load((CHARTS / "kueue/ci/no-metrics-values.yaml").read_text())
    docs = render_chart("kueue", values)
    assert _config(docs)["metrics"]["bindAddress"] == "0"
    assert "waitForPodsReady" not in _config(docs) and "fairSharing" not in _config(docs)
    assert not [r for r in _rules(docs) if r[0] in ("authentication.k8s.io", "authorization.k8s.io")]
    assert not [d for d in docs if d["kind"] == "Service" and "metrics" in d["metadata"]["name"]]


def test_pod_security_restricted(render_chart: RenderChart) -> None:
    pod = _one(render_chart("kueue", NO_CRDS), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}}
    sc = pod["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}


def test_an_integration_without_webhooks_here_is_refused(render_error: Any) -> None:
    err = render_error("kueue", {**NO_CRDS, "manager": {"integrations": ["batch/job", "kubeflow.org/pytorchjob"]}})
    assert 'manager.integrations[1] is "kubeflow.org/pytorchjob"; this chart renders webhooks and RBAC for batch/job only' in err


def test_crds_are_required_unless_turned_off(render_error: Any) -> None:
    err = render_error("kueue")
    assert "no CRDs under module-crds/" in err and "catalog render" in err


@pytest.mark.parametrize("path", sorted((CHARTS / "kueue/ci").glob("*-values.yaml")), ids=lambda p: p.name)
def test_ci_scenarios_render(render_chart: RenderChart, path: Path) -> None:
    assert _one(render_chart("kueue", yaml.safe_load(path.read_text())), "Deployment")


def test_log_level_zero_is_refused_by_the_schema(render_error: Any) -> None:
    # zap rejects --zap-log-level=0 and the manager would never start
    err = render_error("kueue", {**NO_CRDS, "logLevel": 0})
    assert "/logLevel" in err
