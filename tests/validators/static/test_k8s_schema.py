"""Built-in kinds against the Kubernetes v1.36 OpenAPI schemas."""

from __future__ import annotations

import pytest

from gpucatalog.core import errors
from gpucatalog.validators.static import ComponentObjects, PolicyConfig

POD = "spec.template.spec"


def test_good_deployment_has_no_findings(validate, deployment):
    assert validate([deployment]) == []


def test_unknown_field_is_named(validate, deployment, where):
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    deployment["metadata"]["labelz"] = {}
    found = validate([deployment])
    assert where(found) == {
        ("k8s-schema", "Deployment/demo-ns/web", f"{POD}.containers[0].imagePullPolicyy"),
        ("k8s-schema", "Deployment/demo-ns/web", "metadata.labelz"),
    }
    assert all(f.component == "demo" and "unknown field" in f.message for f in found)


def test_wrong_type(validate, deployment, where):
    deployment["spec"]["replicas"] = "three"
    deployment["spec"]["template"]["spec"]["containers"][0]["args"] = "--port=8080"
    found = validate([deployment])
    assert where(found) == {
        ("k8s-schema", "Deployment/demo-ns/web", "spec.replicas"),
        ("k8s-schema", "Deployment/demo-ns/web", f"{POD}.containers[0].args"),
    }
    by_field = {f.field: f.message for f in found}
    assert by_field["spec.replicas"] == "expected integer, got string"
    assert by_field[f"{POD}.containers[0].args"] == "expected array, got string"


def test_missing_required_field(validate, deployment, where):
    del deployment["spec"]["template"]["spec"]["containers"][0]["name"]
    del deployment["spec"]["selector"]
    found = validate([deployment])
    assert where(found) == {
        ("k8s-schema", "Deployment/demo-ns/web", f"{POD}.containers[0].name"),
        ("k8s-schema", "Deployment/demo-ns/web", "spec.selector"),
    }


def test_int_or_string_and_quantity(validate, deployment):
    c = deployment["spec"]["template"]["spec"]["containers"][0]
    c["readinessProbe"]["httpGet"]["port"] = 8080  # integer form is fine too
    assert validate([deployment]) == []
    c["readinessProbe"]["httpGet"]["port"] = True
    c["resources"]["requests"]["memory"] = "64 Mi"
    c["resources"]["limits"]["cpu"] = 2  # a number is a valid quantity
    found = validate([deployment])
    assert {(f.field, f.message) for f in found} == {
        (f"{POD}.containers[0].readinessProbe.httpGet.port", "expected integer or string, got boolean"),
        (
            f"{POD}.containers[0].resources.requests.memory",
            "'64 Mi' is not a quantity (like 500m, 2Gi or 1.5)",
        ),
    }


def test_nulls_are_absent_fields_but_not_list_items(validate, where):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "annotations": None},
        "data": None,
    }
    assert validate([cm]) == []
    cm["binaryData"] = {"k": "aGVsbG8="}
    cm["metadata"]["finalizers"] = [None]
    assert where(validate([cm])) == {("k8s-schema", "ConfigMap/demo-ns/c", "metadata.finalizers[0]")}


def test_map_values_and_quoted_keys(validate, where):
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "annotations": {"a.example/b": 1}},
    }
    found = validate([cm])
    assert where(found) == {("k8s-schema", "ConfigMap/demo-ns/c", 'metadata.annotations["a.example/b"]')}


def test_secret_data_must_be_base64(validate, where):
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "data": {"ok": "aGk=", "bad": "hi there"},
    }
    assert where(validate([secret])) == {("k8s-schema", "Secret/demo-ns/s", "data.bad")}


def test_duplicate_env_name_is_reported(validate, deployment, where):
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    env.append({"name": "MODE", "value": "dev"})
    found = validate([deployment])
    assert where(found) == {("k8s-schema", "Deployment/demo-ns/web", f"{POD}.containers[0].env[1]")}
    assert "duplicate entry name='MODE'" in found[0].message


def test_unknown_kind_and_unknown_version(validate, deployment, where):
    widget = {"apiVersion": "widgets.example/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}
    deployment["apiVersion"] = "apps/v1beta1"
    found = validate([widget, deployment])
    assert where(found) == {
        ("unknown-kind", "Widget/w", "kind"),
        ("unknown-kind", "Deployment/demo-ns/web", "kind"),
    }
    assert "neither a built-in kind of Kubernetes v1.36.3 nor defined by a CRD" in found[0].message


def test_external_kinds_are_accepted_unchecked(validate, where):
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "m", "namespace": "mon"},
        "spec": {"anything": True},
    }
    policy = PolicyConfig(external_kinds=frozenset({"monitoring.coreos.com/v1/ServiceMonitor"}))
    assert validate([monitor], policy=policy) == []
    assert where(validate([monitor])) == {("unknown-kind", "ServiceMonitor/mon/m", "kind")}


def test_object_names_follow_scope(validate, where):
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "reader", "namespace": "ignored"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "bogus": 1}],
    }
    sa = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "web", "namespace": "other"},
        "x": 1,
    }
    assert where(validate([role, sa])) == {
        ("k8s-schema", "ClusterRole/reader", "rules[0].bogus"),
        ("k8s-schema", "ServiceAccount/other/web", "x"),
    }


def test_object_identity_and_duplicates(validate, deployment, where):
    nameless = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}
    other = ComponentObjects(name="second", namespace="demo-ns", objects=[dict(deployment)])
    found = validate([deployment, nameless], extra=[other])
    assert where(found) == {
        ("object-identity", "ConfigMap/document 1", "metadata.name"),
        ("duplicate-object", "Deployment/demo-ns/web", ""),
    }
    dup = next(f for f in found if f.rule == "duplicate-object")
    assert dup.component == "second" and "'demo'" in dup.message


def test_bad_kube_version_is_input_error(deployment):
    with pytest.raises(errors.InputError, match="not a Kubernetes version"):
        from gpucatalog.validators.static import validate_objects

        validate_objects([ComponentObjects("c", "ns", [deployment])], "latest", PolicyConfig())
