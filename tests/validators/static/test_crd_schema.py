"""Custom resources against the CRDs the bundle itself installs (a KAI-style Queue here)."""

from __future__ import annotations

import copy
from typing import Any

from gpucatalog.validators.static import ComponentObjects

QUOTA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "quota": {"type": "number"},
        "limit": {"type": "number"},
        "overQuotaWeight": {"type": "number", "minimum": 0},
    },
}

# Written for these tests: the Queue API's field names (scheduling.run.ai/v2), plus a few
# keywords (int-or-string, preserve-unknown-fields, enum, pattern, exclusiveMinimum) to cover.
QUEUE_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "queues.scheduling.run.ai"},
    "spec": {
        "group": "scheduling.run.ai",
        "names": {"kind": "Queue", "listKind": "QueueList", "plural": "queues", "singular": "queue"},
        "scope": "Cluster",
        "versions": [
            {
                "name": "v1",
                "served": False,
                "storage": False,
                "schema": {"openAPIV3Schema": {"type": "object"}},
            },
            {
                "name": "v2",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {
                                "type": "object",
                                "properties": {
                                    "displayName": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9 -]*$"},
                                    "parentQueue": {"type": "string"},
                                    "priority": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
                                    "preemptMinRuntime": {"x-kubernetes-int-or-string": True},
                                    "tier": {"type": "string", "enum": ["gold", "silver"]},
                                    "owners": {"type": "array", "items": {"type": "string", "nullable": True}},
                                    "resources": {
                                        "type": "object",
                                        "properties": {"gpu": QUOTA, "cpu": QUOTA, "memory": QUOTA},
                                    },
                                    "annotations": {
                                        "type": "object",
                                        "x-kubernetes-preserve-unknown-fields": True,
                                        "properties": {"owner": {"type": "string"}},
                                    },
                                },
                            },
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            },
        ],
    },
}

QUEUE: dict[str, Any] = {
    "apiVersion": "scheduling.run.ai/v2",
    "kind": "Queue",
    "metadata": {"name": "team-a", "labels": {"dept": "research"}},
    "spec": {
        "parentQueue": "research",
        "priority": 100,
        "displayName": "Team A",
        "preemptMinRuntime": "10m",
        "resources": {"gpu": {"quota": 4, "limit": 8, "overQuotaWeight": 1}, "cpu": {"quota": -1}},
    },
}


def crd() -> dict[str, Any]:
    return copy.deepcopy(QUEUE_CRD)


def queue() -> dict[str, Any]:
    return copy.deepcopy(QUEUE)


def test_good_queue_passes(validate):
    assert validate([crd(), queue()]) == []


def test_queue_with_wrong_field_fails_naming_it(validate, where):
    q = queue()
    q["spec"]["resources"]["gpu"]["quotaa"] = 4
    found = validate([crd(), q])
    assert where(found) == {("crd-schema", "Queue/team-a", "spec.resources.gpu.quotaa")}
    assert found[0].message == "unknown field 'quotaa'"


def test_queue_with_wrong_types_and_values(validate, where):
    q = queue()
    q["spec"]["resources"]["gpu"]["quota"] = "lots"
    q["spec"]["priority"] = 0  # exclusiveMinimum 0
    q["spec"]["tier"] = "bronze"
    q["spec"]["displayName"] = "9 lives"
    q["spec"]["preemptMinRuntime"] = 1.5
    q["spec"]["resources"]["gpu"]["overQuotaWeight"] = -1
    found = validate([crd(), q])
    assert where(found) == {
        ("crd-schema", "Queue/team-a", "spec.resources.gpu.quota"),
        ("crd-schema", "Queue/team-a", "spec.priority"),
        ("crd-schema", "Queue/team-a", "spec.tier"),
        ("crd-schema", "Queue/team-a", "spec.displayName"),
        ("crd-schema", "Queue/team-a", "spec.preemptMinRuntime"),
        ("crd-schema", "Queue/team-a", "spec.resources.gpu.overQuotaWeight"),
    }
    messages = {f.field: f.message for f in found}
    assert messages["spec.resources.gpu.quota"] == "expected number, got string"
    assert messages["spec.preemptMinRuntime"] == "expected integer or string, got number"


def test_preserve_unknown_fields_is_respected(validate, where):
    q = queue()
    q["spec"]["owners"] = ["alice", None]  # nullable items
    q["spec"]["annotations"] = {"owner": "ml-platform", "anything": {"goes": [1, 2]}}
    q["status"] = {"whatever": True}
    assert validate([crd(), q]) == []
    q["spec"]["annotations"]["owner"] = 7  # listed properties are still checked
    assert where(validate([crd(), q])) == {("crd-schema", "Queue/team-a", "spec.annotations.owner")}


def test_unknown_top_level_field_and_metadata(validate, where):
    q = queue()
    q["sepc"] = {}
    q["metadata"]["labelz"] = {}
    assert where(validate([crd(), q])) == {
        ("crd-schema", "Queue/team-a", "sepc"),
        ("crd-schema", "Queue/team-a", "metadata.labelz"),
    }


def test_crd_from_another_component_counts(validate):
    kai = ComponentObjects(name="kai-scheduler", namespace="kai-scheduler", objects=[crd()])
    assert validate([queue()], extra=[kai]) == []


def test_queue_without_its_crd_is_unknown(validate, where):
    assert where(validate([queue()])) == {("unknown-kind", "Queue/team-a", "kind")}


def test_unserved_and_undefined_versions(validate, where):
    old = queue()
    old["apiVersion"] = "scheduling.run.ai/v1"
    future = queue()
    future["apiVersion"] = "scheduling.run.ai/v3"
    future["metadata"]["name"] = "team-b"
    found = validate([crd(), old, future])
    assert where(found) == {
        ("crd-version", "Queue/team-a", "apiVersion"),
        ("unknown-kind", "Queue/team-b", "apiVersion"),
    }


def test_namespaced_crd_objects_get_the_release_namespace(validate, where):
    c = crd()
    c["spec"]["scope"] = "Namespaced"
    q = queue()
    q["spec"]["bogus"] = 1
    assert where(validate([c, q])) == {("crd-schema", "Queue/demo-ns/team-a", "spec.bogus")}


def test_the_crd_itself_is_schema_checked(validate, where):
    c = crd()
    c["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"]["typo"] = True
    found = validate([c])
    assert where(found) == {
        (
            "k8s-schema",
            "CustomResourceDefinition/queues.scheduling.run.ai",
            "spec.versions[1].schema.openAPIV3Schema.properties.spec.typo",
        )
    }


def test_embedded_resources_accept_object_fields(validate, where):
    c = crd()
    props = c["spec"]["versions"][1]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    props["template"] = {
        "type": "object",
        "x-kubernetes-embedded-resource": True,
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
    }
    q = queue()
    q["spec"]["template"] = {
        "apiVersion": "v1",
        "kind": "Thing",
        "metadata": {"name": "x"},
        "spec": {"size": 1},
    }
    assert validate([c, q]) == []
    q["spec"]["template"]["spec"]["colour"] = "red"
    assert where(validate([c, q])) == {("crd-schema", "Queue/team-a", "spec.template.spec.colour")}
