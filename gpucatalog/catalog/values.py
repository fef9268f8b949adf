"""Value layering and checking: chart defaults < component defaults < bundle values < profile
overlay, then the chart's ``values.schema.json``. Called by ``catalog.render``."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema

from gpucatalog.core import errors


def merge(base: dict[str, Any], *overlays: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge mappings; later layers win, lists are replaced whole (as Helm does)."""
    out = copy.deepcopy(base)
    for layer in overlays:
        for k, v in layer.items():
            if isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = merge(out[k], v)
            else:
                out[k] = copy.deepcopy(v)
    return out


def check(values: dict[str, Any], schema: dict[str, Any] | None, *, component: str, source: str) -> None:
    """Raise a SchemaError naming the first offending value path."""
    if schema is None:
        return
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    err = jsonschema.exceptions.best_match(validator_cls(schema).iter_errors(values))
    if err is not None:
        field = ".".join(str(p) for p in err.absolute_path) or "(root)"
        raise errors.SchemaError(
            f"values of component {component!r} violate the chart's values.schema.json: {err.message}",
            path=source,
            field=field,
        )
