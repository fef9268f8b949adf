"""The one pass over a rendered bundle: identity, schema, and policy checks for every object.

``validate_objects`` is re-exported by the package façade (see its docstring for the contract).
Order of work: load the Kubernetes schemas for the version (cached), collect the bundle's CRDs
from all components first (a custom resource may come before, or from another component than,
its CRD), work out each namespace's Pod Security level, then run every check on every object
and return all findings sorted, never stopping at the first.
"""

from __future__ import annotations

from typing import Any

from gpucatalog.core import errors
from gpucatalog.validators.static import (
    crds,
    images,
    names,
    objects,
    openapi,
    podsecurity,
    privileged,
    rbac,
    requests,
    schema_check,
    target,
    types,
)


def validate_objects(
    components: list[types.ComponentObjects], kube_version: str, policy: types.PolicyConfig
) -> list[errors.Finding]:
    kube = openapi.load(kube_version)
    everything = [o for c in components for o in c.objects if isinstance(o, dict)]
    crd_kinds = crds.collect(everything)
    checker = schema_check.SchemaChecker(kube, crd_kinds, policy.external_kinds)
    levels = podsecurity.namespace_levels(components, everything)
    findings: list[errors.Finding] = []
    owners: dict[tuple[str, str, str, str], str] = {}
    for comp in components:
        for index, raw in enumerate(comp.objects):
            ident, problems = _identify(comp, index, raw, checker)
            findings += problems
            if ident is None:
                continue
            assert isinstance(raw, dict)
            key = (ident.group, ident.kind, ident.namespace, ident.name)
            t = target.Target(comp, ident, objects.strip_nulls(raw))
            if key in owners:
                findings.append(
                    t.finding("duplicate-object", [], f"also rendered by component {owners[key]!r}")
                )
            owners.setdefault(key, comp.name)
            findings += checker.check(t)
            findings += images.check(t, custom=(ident.group, ident.kind) in crd_kinds)
            findings += requests.check(t, policy)
            findings += privileged.check(t)
            findings += rbac.check(t)
            findings += names.check(t)
            level = levels.get(ident.namespace, policy.default_pod_security)
            findings += podsecurity.check(t, level)
    off = policy.disabled_rules
    kept = [f for f in findings if f.rule not in off and f.rule.split("/")[0] not in off]
    # Components keep the bundle's (install) order; within one, findings sort by object and field.
    order = {c.name: i for i, c in reversed(list(enumerate(components)))}
    return sorted(kept, key=lambda f: (order.get(f.component, len(order)), f.obj, f.field, f.rule, f.message))


def _identify(
    comp: types.ComponentObjects, index: int, raw: Any, checker: schema_check.SchemaChecker
) -> tuple[objects.Identity | None, list[errors.Finding]]:
    where = f"document {index}"
    if not isinstance(raw, dict):
        return None, [errors.Finding("object-identity", "not a mapping", component=comp.name, obj=where)]
    api_version = raw.get("apiVersion")
    kind = raw.get("kind")
    meta = objects.mapping(raw, "metadata")
    name = meta.get("name") or meta.get("generateName")
    missing = [
        f
        for f, v in (("apiVersion", api_version), ("kind", kind), ("metadata.name", name))
        if not isinstance(v, str) or not v
    ]
    if missing:
        label = f"{kind}/{where}" if isinstance(kind, str) and kind else where
        return None, [
            errors.Finding(
                "object-identity", "required to identify the object", component=comp.name, obj=label, field=f
            )
            for f in missing
        ]
    assert isinstance(api_version, str) and isinstance(kind, str) and isinstance(name, str)
    scoped = checker.namespaced(api_version, kind)
    declared_ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else ""
    if scoped is True:
        namespace = declared_ns or comp.namespace
    elif scoped is False:
        namespace = ""
    else:
        namespace = declared_ns
    return objects.Identity(api_version, kind, name, namespace), []
