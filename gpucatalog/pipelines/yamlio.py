"""Load a versioned YAML document of the pipelines (trust file, promotion policy, channel) and
check it against its JSON Schema, turning every problem into an InputError that names the file.

Called by ``trust``, ``channels`` and ``policy``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from gpucatalog.core import errors

API_VERSION = "gpu-catalog.dev/v1alpha1"


def parse(text: str, path: Path, schema: dict[str, Any]) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise errors.InputError(f"not valid YAML ({getattr(exc, 'problem', exc)})", path=str(path), line=line) from exc
    if not isinstance(doc, dict):
        raise errors.SchemaError("empty or truncated document", path=str(path), expected=f"kind {schema['properties']['kind']['const']}")
    validator = jsonschema.Draft202012Validator(schema)
    problems = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if problems:
        first = problems[0]
        field = "/".join(str(p) for p in first.absolute_path) or "(document)"
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise errors.SchemaError(first.message + more, path=str(path), field=field)
    return doc


def load(path: Path, schema: dict[str, Any]) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError as exc:
        raise errors.NotFoundError("file not found", path=str(path)) from exc
    return parse(text, path, schema)


def header(kind: str) -> dict[str, Any]:
    """Schema fragment for ``apiVersion`` + ``kind``."""
    return {"apiVersion": {"const": API_VERSION}, "kind": {"const": kind}}
