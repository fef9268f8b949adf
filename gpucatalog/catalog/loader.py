"""Load the catalog folder into a :class:`model.Catalog`, validating every file against the
JSON Schema of its kind. Called by every CLI command that reads the catalog.

Layout (``catalog/``)::

    components/<name>/component.yaml      kind: Component
    components/<name>/<version>.yaml      kind: ComponentVersion
    bundles/<name>/<version>.yaml         kind: Bundle

An unknown kind, a schema violation or malformed YAML is bad input: exit 2 with
``file:line: field: problem``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from gpucatalog.catalog import model
from gpucatalog.core import errors, yamlfile

SCHEMAS = {"Component": "component.json", "ComponentVersion": "componentversion.json", "Bundle": "bundle.json"}


def default_root() -> Path:
    """$CATALOG_DIR, else the ``catalog/`` folder beside this source tree."""
    env = os.environ.get("CATALOG_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "catalog"


@cache
def schema(kind: str) -> dict[str, Any]:
    text = resources.files("gpucatalog.catalog.schemas").joinpath(SCHEMAS[kind]).read_text()
    result: dict[str, Any] = json.loads(text)
    return result


@cache
def _validator(kind: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema(kind))


def _message(err: jsonschema.ValidationError) -> str:
    if err.validator == "oneOf":
        return "matches none of the allowed forms (a local 'path', or 'url' + 'version' + 'digest')"
    return yamlfile.schema_message(err)


def check_schema(doc: yamlfile.Document, kind: str) -> None:
    yamlfile.check_schema(doc, _validator(kind), _message)


def _kind_of(doc: yamlfile.Document) -> str:
    if not isinstance(doc.data, dict):
        raise errors.SchemaError("expected a mapping with apiVersion and kind", path=str(doc.path), line=1)
    kind = doc.data.get("kind")
    if not isinstance(kind, str) or kind not in SCHEMAS:  # `kind: {}` is not hashable (found by the fuzzer)
        raise errors.SchemaError(
            f"unknown kind {kind!r} in document {doc.index}",
            path=str(doc.path),
            line=doc.line_of(["kind"]),
            field="kind",
            expected=" or ".join(SCHEMAS),
        )
    return str(kind)


def _parse_component(doc: yamlfile.Document) -> model.Component:
    d = doc.data
    return model.Component(name=d["metadata"]["name"], description=d["spec"]["description"], source_file=doc.path)


def _parse_version(doc: yamlfile.Document) -> model.ComponentVersion:
    d, spec = doc.data, doc.data["spec"]
    decl = spec.get("declarations", {})
    return model.ComponentVersion(
        component=d["metadata"]["name"],
        version=d["metadata"]["version"],
        chart=model.ChartSource(**spec["chart"]),
        images=tuple(model.Image(**i) for i in spec.get("images", [])),
        kubernetes=spec["kubernetes"],
        values=spec.get("values", {}),
        declarations=model.Declarations(
            privileged=decl.get("privileged", {}),
            rbac_wildcards=decl.get("rbacWildcards", {}),
            pod_security=decl.get("podSecurity", "baseline"),
            log_patterns=_log_patterns(doc, decl.get("logPatterns", {})),
            log_namespaces=tuple(decl.get("logNamespaces", [])),
        ),
        source_file=doc.path,
        crds=model.ModuleCRDs(**spec["crds"]) if "crds" in spec else None,
    )


def _log_patterns(doc: yamlfile.Document, patterns: dict[str, str]) -> dict[str, str]:
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise errors.InputError(
                f"log pattern {pattern!r} is not a regular expression: {exc}", path=str(doc.path),
                line=doc.line_of(["spec", "declarations", "logPatterns", pattern]),
                field="spec.declarations.logPatterns", expected="a Python regular expression",
            ) from exc
    return dict(patterns)


def _parse_bundle(doc: yamlfile.Document) -> model.Bundle:
    d, spec = doc.data, doc.data["spec"]
    comps = []
    seen: set[str] = set()
    for i, c in enumerate(spec["components"]):
        if c["name"] in seen:
            raise errors.InputError(
                f"component {c['name']!r} appears twice",
                path=str(doc.path),
                line=doc.line_of(["spec", "components", i, "name"]),
                field=f"spec.components[{i}].name",
            )
        seen.add(c["name"])
        comps.append(
            model.BundleComponent(
                name=c["name"],
                version=c["version"],
                release=c.get("release", c["name"]),
                namespace=c["namespace"],
                values=c.get("values", {}),
                depends_on=tuple(c.get("dependsOn", [])),
            )
        )
    profiles = {
        name: model.Profile(
            name=name,
            description=p.get("description", ""),
            values=p.get("values", {}),
            kustomize=p.get("kustomize", {}),
            cluster=p.get("cluster", {}),
            suite_params=p.get("suiteParams", {}),
            suites=tuple(p.get("suites", [])),
        )
        for name, p in spec["profiles"].items()
    }
    return model.Bundle(
        name=d["metadata"]["name"],
        version=d["metadata"]["version"],
        description=spec["description"],
        kube_version=spec["kubernetesVersion"].lstrip("v"),
        components=tuple(comps),
        profiles=profiles,
        suites=tuple(spec.get("suites", [])),
        source_file=doc.path,
        user_supplied_images=tuple(spec.get("userSuppliedImages", [])),
    )


PARSERS: dict[str, Callable[[yamlfile.Document], object]] = {
    "Component": _parse_component,
    "ComponentVersion": _parse_version,
    "Bundle": _parse_bundle,
}


def load_catalog(root: Path | None = None) -> model.Catalog:
    root = (root or default_root()).resolve()
    if not root.is_dir():
        raise errors.NotFoundError(f"catalog folder not found: {root}", field="--catalog-dir")
    components: dict[str, model.Component] = {}
    versions: dict[tuple[str, str], model.ComponentVersion] = {}
    bundles: dict[tuple[str, str], model.Bundle] = {}
    for sub in ("components", "bundles"):
        for path in sorted((root / sub).rglob("*.yaml")):
            for doc in yamlfile.load_documents(path):
                kind = _kind_of(doc)
                check_schema(doc, kind)
                obj = PARSERS[kind](doc)
                if isinstance(obj, model.Component):
                    components[obj.name] = obj
                elif isinstance(obj, model.ComponentVersion):
                    versions[(obj.component, obj.version)] = obj
                elif isinstance(obj, model.Bundle):
                    if (obj.name, obj.version) in bundles:
                        raise errors.InputError(f"bundle {obj.ref} defined twice", path=str(path))
                    bundles[(obj.name, obj.version)] = obj
    for cv in versions.values():
        if cv.component not in components:
            raise errors.NotFoundError(
                f"version of unknown component {cv.component!r}", path=str(cv.source_file), field="metadata.name"
            )
    return model.Catalog(
        root=root, repo_root=root.parent, components=components, versions=versions, bundles=bundles
    )
