"""Schema validation of rendered objects: built-in kinds against Kubernetes' OpenAPI schemas,
custom resources against the bundle's own CRDs, anything else reported as an unknown kind.

Called by ``validate`` once per object. Validators are compiled once per schema and reused
(built-in ones for the life of the process), and jsonschema's errors are rewritten into
findings that name the exact field, e.g. the unknown key itself rather than its parent.

Rules: ``k8s-schema`` (built-in kind), ``crd-schema`` (custom resource), ``unknown-kind``,
``crd-version`` (a version the CRD defines but does not serve).
"""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
from jsonschema import validators

from gpucatalog.core import errors
from gpucatalog.validators.static import crds, objects, openapi, target

_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def _list_type(
    validator: Any, list_type: Any, instance: Any, schema: dict[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    """``x-kubernetes-list-type``: ``map`` lists have unique keys, ``set`` lists unique items."""
    if not isinstance(instance, list) or list_type not in ("map", "set"):
        return
    seen: dict[Any, int] = {}
    keys = schema.get("x-kubernetes-list-map-keys") or []
    for i, item in enumerate(instance):
        if list_type == "map":
            if not isinstance(item, dict):
                continue
            key: Any = tuple(repr(item.get(k)) for k in keys)
            shown = ", ".join(f"{k}={item.get(k)!r}" for k in keys)
        else:
            key, shown = repr(item), repr(item)
        if key in seen:
            yield jsonschema.ValidationError(f"duplicate entry {shown} (also at index {seen[key]})", path=[i])
        else:
            seen[key] = i


_Validator = validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, {"x-kubernetes-list-type": _list_type}
)
_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("byte", raises=(binascii.Error, ValueError))
def _is_base64(value: object) -> bool:
    if isinstance(value, str):
        base64.b64decode(value, validate=True)
    return True


@functools.lru_cache(maxsize=512)
def _builtin_validator(version: str, definition: str) -> Any:
    kube = openapi.load(version)
    return _Validator(kube.schema_for(definition), format_checker=_FORMATS)


class SchemaChecker:
    """Validates objects against the built-in and the bundle's custom schemas."""

    def __init__(
        self,
        kube: openapi.KubeSchemas,
        crd_kinds: dict[tuple[str, str], crds.CrdKind],
        external_kinds: frozenset[str],
    ) -> None:
        self.kube = kube
        self.crd_kinds = crd_kinds
        self.external_kinds = external_kinds
        self._crd_validators: dict[tuple[str, str, str], Any] = {}
        # Scope by (group, kind) over all versions, so an object of an unknown version of a
        # known kind is still named with its namespace.
        self._scope: dict[tuple[str, str], bool] = {}
        for key, info in kube.kinds.items():
            group_version, _, kind = key.rpartition("/")
            self._scope[(objects.split_api_version(group_version)[0], kind)] = info.namespaced

    def namespaced(self, api_version: str, kind: str) -> bool | None:
        """Whether objects of this kind live in a namespace; None when the kind is unknown."""
        group = objects.split_api_version(api_version)[0]
        crd = self.crd_kinds.get((group, kind))
        if crd is not None:
            return crd.namespaced
        return self._scope.get((group, kind))

    def check(self, t: target.Target) -> list[errors.Finding]:
        ident = t.ident
        if ident.gvk in self.external_kinds:
            return []
        crd = self.crd_kinds.get((ident.group, ident.kind))
        if crd is not None:
            return self._check_custom(t, crd)
        info = self.kube.kinds.get(ident.gvk)
        if info is None:
            return [
                t.finding(
                    "unknown-kind",
                    ["kind"],
                    f"{ident.api_version} {ident.kind} is neither a built-in kind of Kubernetes "
                    f"{self.kube.version} nor defined by a CRD of this bundle",
                )
            ]
        validator = _builtin_validator(self.kube.version, info.definition)
        return list(_findings(t, "k8s-schema", validator.iter_errors(t.obj)))

    def _check_custom(self, t: target.Target, crd: crds.CrdKind) -> list[errors.Finding]:
        version = t.ident.version
        if version in crd.unserved:
            return [
                t.finding("crd-version", ["apiVersion"], f"CRD {crd.crd} does not serve version {version}")
            ]
        if version not in crd.versions:
            known = ", ".join(sorted(crd.versions)) or "none"
            return [
                t.finding(
                    "unknown-kind",
                    ["apiVersion"],
                    f"CRD {crd.crd} has no version {version} (served: {known})",
                )
            ]
        schema = crd.versions[version]
        if schema is None:
            return []
        key = (crd.group, crd.kind, version)
        validator = self._crd_validators.get(key)
        if validator is None:
            validator = _Validator({**schema, "$defs": self.kube.defs}, format_checker=_FORMATS)
            self._crd_validators[key] = validator
        return list(_findings(t, "crd-schema", validator.iter_errors(t.obj)))


def _findings(
    t: target.Target, rule: str, errs: Iterator[jsonschema.ValidationError]
) -> Iterator[errors.Finding]:
    for err in errs:
        path = list(err.absolute_path)
        inst = err.instance
        kw = err.validator
        if kw == "additionalProperties" and isinstance(inst, dict):
            known = err.schema.get("properties", {}) if isinstance(err.schema, Mapping) else {}
            for key in inst:
                if key not in known:
                    yield t.finding(rule, [*path, key], f"unknown field {key!r}")
        elif kw == "required" and isinstance(inst, dict):
            wanted = err.validator_value if isinstance(err.validator_value, list) else []
            for key in wanted:
                if key not in inst:
                    yield t.finding(rule, [*path, key], "required field is missing")
        elif kw == "type":
            yield t.finding(rule, path, f"expected {_expected(err.validator_value)}, got {_json_type(inst)}")
        elif kw == "anyOf":
            yield t.finding(rule, path, _any_of_message(err))
        elif kw == "format":
            yield t.finding(rule, path, f"not valid {err.validator_value} data")
        elif kw == "enum":
            yield t.finding(rule, path, f"{inst!r} is not one of {err.validator_value!r}")
        elif kw == "pattern":
            yield t.finding(rule, path, f"{inst!r} does not match the pattern {err.validator_value!r}")
        else:
            yield t.finding(rule, path, err.message)


def _expected(types: Any) -> str:
    return " or ".join(types) if isinstance(types, list) else str(types)


def _any_of_message(err: jsonschema.ValidationError) -> str:
    """int-or-string and quantities: say what was expected instead of 'not valid under any'."""
    types = [e.validator_value for e in err.context if e.validator == "type"]
    others = [e for e in err.context if e.validator != "type"]
    if others:
        best = others[0]
        if best.validator == "pattern" and best.validator_value == openapi.QUANTITY_PATTERN:
            return f"{err.instance!r} is not a quantity (like 500m, 2Gi or 1.5)"
        return best.message
    if types:
        return f"expected {' or '.join(_expected(t) for t in types)}, got {_json_type(err.instance)}"
    return err.message
