"""What an upgrade from one rendered bundle version to another would break, found without a cluster.

Three grades, each a list of findings naming component, object and field:

- ``refusals``: the upgrade cannot be certified at all (bad input, exit 2): a component the old
  version installs that the new one drops while it still holds objects; a CRD whose new schema
  drops a field (or a served version) that objects of the old version use.
- ``immutable``: changes Kubernetes rejects on update (a Deployment's, DaemonSet's or
  StatefulSet's ``spec.selector``; a StatefulSet's ``serviceName``, ``volumeClaimTemplates``,
  ``podManagementPolicy``; a Job's ``selector``; a Service's ``clusterIP``; a PVC's
  ``storageClassName``; a Kueue LocalQueue's ``clusterQueue``, which Kueue's webhook refuses to
  change): a certification with these fails before any cluster starts.
- ``risks``: the rest ``catalog diff`` highlights: CRD fields removed (not in use), chart values
  the old version set that the new one no longer sets, objects the old version rendered that the
  new one drops (a renamed quota object is one).

Called by ``pipelines.upgrade`` and ``catalog diff``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpucatalog.catalog import render
from gpucatalog.core import errors

# kind -> spec fields Kubernetes will not change on update
IMMUTABLE: dict[str, tuple[str, ...]] = {
    "Deployment": ("selector",),
    "DaemonSet": ("selector",),
    "ReplicaSet": ("selector",),
    "StatefulSet": ("selector", "serviceName", "volumeClaimTemplates", "podManagementPolicy"),
    "Job": ("selector", "completionMode"),
    "Service": ("clusterIP",),
    "PersistentVolumeClaim": ("storageClassName", "volumeName"),
    # Kueue's webhook refuses to move a LocalQueue to another ClusterQueue
    "LocalQueue": ("clusterQueue",),
}
CRD = "CustomResourceDefinition"


def key(o: dict[str, Any]) -> str:
    md = o.get("metadata") or {}
    ns = md.get("namespace") or ""
    return f"{o.get('kind')} {ns + '/' if ns else ''}{md.get('name')}"


def _index(rb: render.RenderedBundle) -> dict[str, dict[str, dict[str, Any]]]:
    return {c.name: {key(o): o for o in c.objects} for c in rb.components}


def schema_fields(schema: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted paths of every property an OpenAPI v3 schema declares (array items as ``[]``)."""
    for name, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}" if prefix else name
        yield path
        yield from schema_fields(sub, path)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from schema_fields(items, prefix + "[]")


def object_fields(value: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of every field an object sets, in ``schema_fields``' notation."""
    if isinstance(value, dict):
        for k, v in value.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            yield path
            yield from object_fields(v, path)
    elif isinstance(value, list):
        for v in value:
            yield from object_fields(v, prefix + "[]")


def _crd_versions(crd: dict[str, Any]) -> dict[str, set[str]]:
    out = {}
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("served", True):
            schema = (v.get("schema") or {}).get("openAPIV3Schema") or {}
            out[str(v.get("name"))] = set(schema_fields(schema))
    return out


def _crds(rb: render.RenderedBundle) -> dict[str, tuple[str, dict[str, Any]]]:
    """CRD name -> (component, CRD)."""
    return {o["metadata"]["name"]: (c.name, o) for c in rb.components for o in c.objects if o.get("kind") == CRD}


def _in_use(rb: render.RenderedBundle, crd: dict[str, Any]) -> list[tuple[str, str, set[str]]]:
    """(component, object, fields it sets) of every object of the CRD's kind in a rendering."""
    spec = crd.get("spec") or {}
    group, kind = spec.get("group"), (spec.get("names") or {}).get("kind")
    out = []
    for c in rb.components:
        for o in c.objects:
            if o.get("kind") == kind and str(o.get("apiVersion", "")).split("/")[0] == group:
                body = {k: v for k, v in o.items() if k not in ("apiVersion", "kind", "metadata")}
                out.append((c.name, key(o), set(object_fields(body)) | {"apiVersion:" + str(o.get("apiVersion"))}))
    return out


def refusals(old: render.RenderedBundle, new: render.RenderedBundle) -> list[errors.Finding]:
    findings: list[errors.Finding] = []
    new_names = {c.name for c in new.components}
    for c in old.components:
        if c.name not in new_names and c.objects:
            kinds = sorted({key(o) for o in c.objects})
            findings.append(errors.Finding(
                "upgrade-component-removed",
                f"{new.ref} drops component {c.name}, which {old.ref} installed with {len(c.objects)} objects "
                f"({', '.join(kinds[:3])}{', …' if len(kinds) > 3 else ''}); uninstall it first or keep it",
                component=c.name, obj=kinds[0]))
    new_crds = _crds(new)
    for name, (comp, crd) in _crds(old).items():
        users = _in_use(old, crd)
        if name not in new_crds:
            if users:
                findings.append(errors.Finding("upgrade-crd-removed", f"{new.ref} no longer has CRD {name}, "
                                               f"and {users[0][1]} of {old.ref} is one", component=comp, obj=f"{CRD} {name}"))
            continue
        old_v, new_v = _crd_versions(crd), _crd_versions(new_crds[name][1])
        group = (crd.get("spec") or {}).get("group")
        for version, fields in old_v.items():
            api = f"apiVersion:{group}/{version}"
            using = [(uc, uo, f) for uc, uo, f in users if api in f]
            if version not in new_v:
                if using:
                    findings.append(errors.Finding("upgrade-crd-version-removed",
                                                   f"{new.ref} no longer serves {group}/{version}, used by {using[0][1]}",
                                                   component=comp, obj=f"{CRD} {name}", field=f"spec.versions[{version}]"))
                continue
            for field in sorted(fields - new_v[version]):
                for uc, uo, f in using:
                    if field in f:
                        findings.append(errors.Finding(
                            "upgrade-crd-field-removed",
                            f"{new.ref}'s CRD {name} ({version}) drops field {field}, which {uo} ({uc}) sets",
                            component=comp, obj=uo, field=field))
    return findings


def _get(o: dict[str, Any], field: str) -> Any:
    return (o.get("spec") or {}).get(field)


def immutable(old: render.RenderedBundle, new: render.RenderedBundle) -> list[errors.Finding]:
    findings: list[errors.Finding] = []
    new_idx = _index(new)
    for comp, objs in _index(old).items():
        for k, o in objs.items():
            n = new_idx.get(comp, {}).get(k)
            if n is None:
                continue
            for field in IMMUTABLE.get(str(o.get("kind")), ()):
                if _get(o, field) != _get(n, field):
                    findings.append(errors.Finding(
                        "upgrade-immutable-field",
                        f"{k} changes spec.{field} ({_get(o, field)!r} -> {_get(n, field)!r}); Kubernetes rejects "
                        "this on update (the object would have to be deleted and recreated)",
                        component=comp, obj=k, field=f"spec.{field}"))
    return findings


def _value_paths(v: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(v, dict) and v:
        for k, sub in v.items():
            yield from _value_paths(sub, f"{prefix}.{k}" if prefix else str(k))
    elif prefix:  # a component given no values at all sets no path
        yield prefix


def risks(old: render.RenderedBundle, new: render.RenderedBundle) -> list[errors.Finding]:
    findings: list[errors.Finding] = []
    new_crds = _crds(new)
    for name, (comp, crd) in _crds(old).items():
        if name in new_crds:
            old_v, new_v = _crd_versions(crd), _crd_versions(new_crds[name][1])
            for version, fields in old_v.items():
                for field in sorted(fields - new_v.get(version, fields)):
                    findings.append(errors.Finding("crd-field-removed", f"CRD {name} ({version}) drops {field}",
                                                   component=comp, obj=f"{CRD} {name}", field=field))
    new_comps = {c.name: c for c in new.components}
    new_idx = _index(new)
    for c in old.components:
        n = new_comps.get(c.name)
        if n is None:
            continue
        for path in sorted(set(_value_paths(c.values)) - set(_value_paths(n.values))):
            findings.append(errors.Finding("value-removed", f"value {path} set by {old.ref} is not set by {new.ref}",
                                           component=c.name, field=path))
        for k in sorted(set(_index(old)[c.name]) - set(new_idx.get(c.name, {}))):
            findings.append(errors.Finding("object-removed", f"{k} is rendered by {old.ref} but not by {new.ref}: "
                                           "Helm deletes it on upgrade", component=c.name, obj=k))
    return findings
