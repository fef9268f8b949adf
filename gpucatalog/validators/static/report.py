"""Findings as JSON (``catalog validate --json``) and back.

Each finding becomes ``{"rule", "component", "object", "field", "message"}``; the list keeps the
order ``validate_objects`` returns (components in bundle order, then object, field, rule).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from gpucatalog.core import errors


def finding_to_dict(f: errors.Finding) -> dict[str, str]:
    return {"rule": f.rule, "component": f.component, "object": f.obj, "field": f.field, "message": f.message}


def findings_to_json(findings: Iterable[errors.Finding], *, indent: int | None = 2) -> str:
    return json.dumps([finding_to_dict(f) for f in findings], indent=indent, sort_keys=False)


def findings_from_json(text: str) -> list[errors.Finding]:
    doc: Any = json.loads(text)
    if not isinstance(doc, list):
        raise errors.InputError(
            "findings JSON must be a list", expected="[{rule, component, object, field, message}]"
        )
    return [
        errors.Finding(
            rule=d["rule"], message=d["message"], component=d["component"], obj=d["object"], field=d["field"]
        )
        for d in doc
    ]
