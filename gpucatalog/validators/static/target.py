"""The object a check is looking at, and the one way checks turn a problem into a Finding.

Built by ``validate`` for each rendered object; passed to every check module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpucatalog.core import errors
from gpucatalog.validators.static import objects, types


@dataclass(frozen=True)
class Target:
    component: types.ComponentObjects
    ident: objects.Identity
    obj: dict[str, Any]  # nulls already stripped

    def finding(self, rule: str, field: Iterable[str | int], message: str) -> errors.Finding:
        return errors.Finding(
            rule=rule,
            message=message,
            component=self.component.name,
            obj=self.ident.ref,
            field=objects.field_path(field),
        )
