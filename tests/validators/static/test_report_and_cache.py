"""JSON output of findings, the on-disk schema cache, version resolution and the façade."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

import gpucatalog.validators.static as static
from gpucatalog.core import errors
from gpucatalog.validators.static import ComponentObjects, openapi


def test_findings_json_round_trip(validate, deployment):
    deployment["spec"]["replicas"] = "x"
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx"
    found = validate([deployment])
    text = static.findings_to_json(found)
    doc = json.loads(text)
    assert [d["rule"] for d in doc] == [f.rule for f in found]
    assert set(doc[0]) == {"rule", "component", "object", "field", "message"}
    assert doc[0]["object"] == "Deployment/demo-ns/web"
    assert static.findings_from_json(text) == found
    with pytest.raises(dataclasses.FrozenInstanceError):
        found[0].rule = "other"  # type: ignore[misc]


def test_findings_keep_component_order_then_sort(validate, deployment):
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx"
    deployment["spec"]["replicas"] = "x"
    later = copy.deepcopy(deployment)
    later["metadata"]["name"] = "api"
    found = validate([deployment], extra=[ComponentObjects("a-second", "demo-ns", [later])])
    assert [f.component for f in found] == ["demo"] * 2 + ["a-second"] * 2
    assert found[:2] == sorted(found[:2], key=lambda f: (f.obj, f.field, f.rule))
    assert [f.field for f in found[:2]] == ["spec.replicas", "spec.template.spec.containers[0].image"]


def test_disabled_rules_and_families(validate, deployment):
    deployment["spec"]["template"]["spec"]["hostNetwork"] = True
    policy = static.PolicyConfig(disabled_rules=frozenset({"pod-security", "privileged-undeclared"}))
    assert validate([deployment], policy=policy) == []
    assert {f.rule for f in validate([deployment])} == {
        "pod-security/host-namespaces",
        "privileged-undeclared",
    }


@pytest.mark.parametrize(
    ("given", "resolved"),
    [("1.36", "v1.36.3"), ("v1.36", "v1.36.3"), ("1.36.1", "v1.36.1"), ("v1.35", "v1.35.0")],
)
def test_resolve_version(given, resolved):
    assert openapi.resolve_version(given) == resolved


@pytest.mark.toolchain  # converts the schemas of the pinned Kubernetes module
def test_cache_is_written_reused_and_rebuilt_when_damaged(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path))
    openapi._load_resolved.cache_clear()
    try:
        first = openapi.load("1.36")
        path = openapi.cache_file("v1.36.3")
        assert path.parent == tmp_path / "schemas" and path.is_file()
        assert first.kinds["apps/v1/Deployment"] == openapi.KindInfo("io.k8s.api.apps.v1.Deployment", True)
        assert first.kinds["rbac.authorization.k8s.io/v1/ClusterRole"].namespaced is False
        assert "io.k8s.api.core.v1.PodSpec" in first.defs

        # A second process (cleared memo) reads the cache and never converts the spec.
        openapi._load_resolved.cache_clear()

        def no_convert(*_a: object) -> None:
            raise AssertionError("converted again although the cache was valid")

        monkeypatch.setattr(openapi, "convert_spec_dir", no_convert)
        assert openapi.load("1.36").kinds == first.kinds

        # A damaged cache file is rebuilt, not trusted.
        monkeypatch.undo()
        monkeypatch.setenv("GPU_CATALOG_CACHE", str(tmp_path))
        path.write_text('{"format": 1, "kubernetesVer')
        openapi._load_resolved.cache_clear()
        assert openapi.load("1.36").kinds == first.kinds
        assert json.loads(path.read_text())["kubernetesVersion"] == "v1.36.3"
    finally:
        openapi._load_resolved.cache_clear()


def test_facade_exports():
    assert sorted(static.__all__) == [
        "ComponentObjects",
        "PolicyConfig",
        "findings_from_json",
        "findings_to_json",
        "lint_chart",
        "validate_objects",
    ]
    assert all(hasattr(static, name) for name in static.__all__)
    assert issubclass(errors.Finding, object) and dataclasses.is_dataclass(errors.Finding)
