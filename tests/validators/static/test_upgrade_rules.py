"""Static upgrade checks on hand-made renderings: each refusal, immutable change and risk names
the component, the object and the field."""

from __future__ import annotations

import copy
from typing import Any

from gpucatalog.catalog import render
from gpucatalog.validators.static import upgrade_rules


def _crd(fields: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "pools.example.dev"},
            "spec": {"group": "example.dev", "names": {"kind": "Pool", "plural": "pools"}, "versions": [
                {"name": "v1", "served": True, "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": fields}}}}}]}}


POOL = {"apiVersion": "example.dev/v1", "kind": "Pool", "metadata": {"name": "gpus"},
        "spec": {"quota": 8, "tiers": [{"name": "a"}]}}
DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ctl", "namespace": "sys"},
          "spec": {"selector": {"matchLabels": {"app": "ctl"}}, "template": {}}}
STS = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "sys"},
       "spec": {"selector": {"matchLabels": {"app": "db"}}, "serviceName": "db", "volumeClaimTemplates": []}}


def _rb(version: str, comps: dict[str, list[dict[str, Any]]], values: dict[str, Any] | None = None) -> render.RenderedBundle:
    return render.RenderedBundle(
        bundle="b", version=version, profile="sim", kube_version="1.36.3", digest="sha256:" + "0" * 64, lock={},
        components=[render.RenderedComponent(name=n, version="1.0.0", namespace="sys", release=n, chart_dir="",
                                             values=(values or {}).get(n, {}), objects=objs, manifest_text="")
                    for n, objs in comps.items()])


FULL = {"spec": {"type": "object"}}


def _old() -> render.RenderedBundle:
    fields = {"quota": {"type": "integer"}, "tiers": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "weight": {"type": "integer"}}}}}
    return _rb("1.0.0", {"op": [_crd(fields), DEPLOY, STS], "pools": [POOL]},
               {"op": {"resources": {"requests": {"memory": "64Mi"}}, "debug": True}})


def test_unchanged_upgrade_has_nothing_to_say() -> None:
    old = _old()
    new = copy.deepcopy(old)
    assert upgrade_rules.refusals(old, new) == []
    assert upgrade_rules.immutable(old, new) == []
    assert upgrade_rules.risks(old, new) == []


def test_crd_dropping_a_field_in_use_is_refused_naming_object_and_field() -> None:
    old = _old()
    new = copy.deepcopy(old)
    props = new.components[0].objects[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    del props["quota"]  # Pool gpus sets spec.quota
    del props["tiers"]["items"]["properties"]["weight"]  # nobody sets it: a risk, not a refusal
    found = upgrade_rules.refusals(old, new)
    assert [(f.rule, f.obj, f.field) for f in found] == [("upgrade-crd-field-removed", "Pool gpus", "spec.quota")]
    assert "pools.example.dev" in found[0].message
    risks = {(f.rule, f.field) for f in upgrade_rules.risks(old, new)}
    assert ("crd-field-removed", "spec.tiers[].weight") in risks and ("crd-field-removed", "spec.quota") in risks


def test_crd_no_longer_serving_a_version_in_use_is_refused() -> None:
    old = _old()
    new = copy.deepcopy(old)
    new.components[0].objects[0]["spec"]["versions"][0]["name"] = "v2"
    found = upgrade_rules.refusals(old, new)
    assert [f.rule for f in found] == ["upgrade-crd-version-removed"] and "Pool gpus" in found[0].message


def test_component_removed_while_holding_objects_is_refused() -> None:
    old = _old()
    new = _rb("2.0.0", {"op": old.components[0].objects})
    found = upgrade_rules.refusals(old, new)
    assert [(f.rule, f.component, f.obj) for f in found] == [("upgrade-component-removed", "pools", "Pool gpus")]


def test_immutable_fields_kubernetes_rejects() -> None:
    old = _old()
    new = copy.deepcopy(old)
    new.components[0].objects[1]["spec"]["selector"] = {"matchLabels": {"app": "controller"}}
    new.components[0].objects[2]["spec"]["serviceName"] = "db-headless"
    new.components[0].objects[2]["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "data"}}]
    found = {(f.obj, f.field) for f in upgrade_rules.immutable(old, new)}
    assert found == {("Deployment sys/ctl", "spec.selector"), ("StatefulSet sys/db", "spec.serviceName"),
                     ("StatefulSet sys/db", "spec.volumeClaimTemplates")}


def test_removed_values_and_objects_are_risks() -> None:
    old = _old()
    new = copy.deepcopy(old)
    new.components[0].values = {"resources": {"requests": {"memory": "96Mi"}}}
    new.components[1].objects = [{**POOL, "metadata": {"name": "gpus-renamed"}}]
    risks = {(f.rule, f.component, f.obj or f.field) for f in upgrade_rules.risks(old, new)}
    assert risks == {("value-removed", "op", "debug"), ("object-removed", "pools", "Pool gpus")}


def test_values_given_only_by_the_new_version_remove_nothing() -> None:
    # gpu-scheduling 0.2.0 gives team-queues values where 0.1.0 gave none: once reported as
    # "value  set by 0.1.0 is not set" (the empty root taken for a path).
    old = _old()
    old.components[1].values = {}
    new = copy.deepcopy(old)
    new.components[1].values = {"departments": [{"name": "research"}]}
    assert upgrade_rules.risks(old, new) == []
