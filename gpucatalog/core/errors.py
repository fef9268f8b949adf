"""The one exception tree of gpu-catalog.

::

    CatalogError                     base; never raised directly
    ├── InputError                   exit 2: bad input or usage; names file, field, expected
    │   ├── SchemaError              a catalog file or values document violates its schema
    │   ├── NotFoundError            unknown bundle, component, version, shape, cluster …
    │   └── ConflictError            output exists, name already running, port in use …
    ├── CheckFailed                  exit 1: a validation / conformance / promotion check failed
    └── ToolError                    exit 1: an external command failed (command + stderr)

The CLI's single top-level handler maps these to exit codes and prints ``str(err)``: one line a
person can act on. Everything else is a bug and shows a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class CatalogError(Exception):
    """Base of every error gpu-catalog raises on purpose."""

    exit_code = 1


class InputError(CatalogError):
    """Bad input or usage (exit 2). ``path``/``line``/``field`` locate the problem."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
        expected: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.field = field
        self.expected = expected
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.path:
            where = self.path + (f":{self.line}" if self.line else "") + ": "
        field = f"{self.field}: " if self.field else ""
        expected = f" (expected {self.expected})" if self.expected else ""
        return f"{where}{field}{self.message}{expected}"


class SchemaError(InputError):
    """A document does not match its JSON Schema."""


class NotFoundError(InputError):
    """Something named on the command line or in a file does not exist."""


class ConflictError(InputError):
    """The request conflicts with existing state (an output folder, a running cluster, a port)."""


@dataclass(frozen=True)
class Finding:
    """One failed check: where (component/object/field) and which rule."""

    rule: str
    message: str
    component: str = ""
    obj: str = ""
    field: str = ""

    def __str__(self) -> str:
        loc = "/".join(p for p in (self.component, self.obj) if p)
        fld = f" {self.field}" if self.field else ""
        return f"[{self.rule}] {loc}{fld}: {self.message}"


class CheckFailed(CatalogError):
    """One or more checks failed (exit 1); carries every finding, not just the first."""

    exit_code = 1

    def __init__(self, summary: str, findings: Sequence[Finding] = ()) -> None:
        self.summary = summary
        self.findings = list(findings)
        super().__init__(summary)


class ToolError(CatalogError):
    """An external command failed; the message carries the command and its stderr."""

    exit_code = 1

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr
        tail = stderr.strip().splitlines()[-15:]
        super().__init__(
            f"command failed (exit {returncode}): {' '.join(self.argv)}" + ("\n  " + "\n  ".join(tail) if tail else "")
        )
