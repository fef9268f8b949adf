"""Custom resource schemas taken from the CRDs the bundle itself installs.

``collect`` finds every ``apiextensions.k8s.io/v1`` CustomResourceDefinition among the rendered
objects of all components (charts' ``crds/`` folders included) and ``convert_crd_schema`` turns
each served version's ``openAPIV3Schema`` into JSON Schema the way the API server treats it:

- object nodes reject fields they do not list (the server prunes them; ``kubectl apply``'s
  strict field validation rejects them), except under ``x-kubernetes-preserve-unknown-fields``,
  which applies to its own node only (listed properties below it are still checked);
- ``x-kubernetes-int-or-string`` accepts an integer or a string, ``nullable`` also null;
- ``x-kubernetes-embedded-resource`` nodes also accept ``apiVersion``, ``kind`` and ``metadata``;
- ``exclusiveMinimum``/``exclusiveMaximum`` are OpenAPI 3.0 booleans and become draft 2020-12
  numbers; the value validations of ``allOf``/``anyOf``/``oneOf``/``not`` stay as they are
  (they may not add fields, so no unknown-field rule is added inside them);
- the root's ``metadata`` is checked against Kubernetes' own ``ObjectMeta``;
- a ``pattern`` Python cannot compile (RE2-only syntax) is dropped rather than guessed at.

CEL rules (``x-kubernetes-validations``) are not evaluated. Called by ``schema_check``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpucatalog.validators.static import objects

OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

_VALUE_KEYWORDS = (
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "multipleOf",
    "minProperties",
    "maxProperties",
    "required",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
)


@dataclass(frozen=True)
class CrdKind:
    """One kind a bundle CRD defines, with a schema per served version."""

    crd: str  # the CRD's metadata.name, e.g. queues.scheduling.run.ai
    group: str
    kind: str
    namespaced: bool
    versions: dict[str, dict[str, Any] | None]  # served version -> converted schema (None: no schema)
    unserved: frozenset[str]


def collect(all_objects: list[dict[str, Any]]) -> dict[tuple[str, str], CrdKind]:
    """(group, kind) -> CrdKind for every CRD among ``all_objects``."""
    out: dict[tuple[str, str], CrdKind] = {}
    for obj in all_objects:
        if (
            obj.get("kind") != "CustomResourceDefinition"
            or obj.get("apiVersion") != "apiextensions.k8s.io/v1"
        ):
            continue
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            continue
        group = spec.get("group")
        names = spec.get("names")
        kind = names.get("kind") if isinstance(names, dict) else None
        if not isinstance(group, str) or not isinstance(kind, str):
            continue  # the built-in CRD schema reports what is missing
        served: dict[str, dict[str, Any] | None] = {}
        unserved: set[str] = set()
        for v in spec.get("versions") or []:
            if not isinstance(v, dict) or not isinstance(v.get("name"), str):
                continue
            if not v.get("served", False):
                unserved.add(v["name"])
                continue
            schema = (v.get("schema") or {}).get("openAPIV3Schema")
            served[v["name"]] = convert_root(schema) if isinstance(schema, dict) else None
        out[(group, kind)] = CrdKind(
            crd=objects.str_field(obj, "metadata", "name"),
            group=group,
            kind=kind,
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            versions=served,
            unserved=frozenset(unserved),
        )
    return out


def convert_root(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema of a whole custom resource (to be used with the built-in ``$defs``)."""
    out = convert_crd_schema(schema)
    props = out.setdefault("properties", {})
    # Every resource has these; the CRD's own "metadata: {type: object}" says nothing more.
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    props["metadata"] = {"$ref": f"#/$defs/{OBJECT_META}"}
    if not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def convert_crd_schema(node: dict[str, Any], *, structural: bool = True) -> dict[str, Any]:
    """One JSONSchemaProps node -> JSON Schema. ``structural`` is False inside value validations."""
    out: dict[str, Any] = {k: node[k] for k in _VALUE_KEYWORDS if k in node}
    typ = node.get("type")
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    elif isinstance(typ, str):
        # Null map values are stripped before validation; this covers nulls inside lists.
        out["type"] = [typ, "null"] if node.get("nullable") else typ
    pattern = node.get("pattern")
    if isinstance(pattern, str) and _compiles(pattern):
        out["pattern"] = pattern
    for bound in ("Minimum", "Maximum"):
        limit = node.get(bound.lower())
        if node.get("exclusive" + bound) is True and limit is not None:
            out.pop(bound.lower(), None)
            out["exclusive" + bound] = limit
    props = node.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: convert_crd_schema(v, structural=structural) for k, v in props.items()}
    items = node.get("items")
    if isinstance(items, dict):
        out["items"] = convert_crd_schema(items, structural=structural)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = convert_crd_schema(extra, structural=structural)
    elif isinstance(extra, bool):
        out["additionalProperties"] = extra
    if node.get("x-kubernetes-embedded-resource"):
        embedded = out.setdefault("properties", {})
        embedded.setdefault("apiVersion", {"type": "string"})
        embedded.setdefault("kind", {"type": "string"})
        embedded["metadata"] = {"type": "object"}  # the server checks only name/namespace here
    closed = (
        structural
        and typ == "object"
        and "additionalProperties" not in out
        and not node.get("x-kubernetes-preserve-unknown-fields")
    )
    if closed:
        out["additionalProperties"] = False
    for key in ("allOf", "anyOf", "oneOf"):
        subs = node.get(key)
        if isinstance(subs, list):
            converted = [convert_crd_schema(s, structural=False) for s in subs if isinstance(s, dict)]
            if key == "anyOf" and "anyOf" in out:
                out.setdefault("allOf", []).append({"anyOf": converted})
            else:
                out[key] = converted
    neg = node.get("not")
    if isinstance(neg, dict):
        out["not"] = convert_crd_schema(neg, structural=False)
    return out


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True
