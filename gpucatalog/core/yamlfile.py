"""Read YAML documents while remembering where each value came from, and check them against a
JSON Schema, so every problem is reported as ``file:line: field: problem`` (exit 2).

Called by ``catalog.loader`` (multi-document catalog files, one schema per kind) and by the
pipelines' single-document files (trust file, promotion policy, channel) through :func:`load_one`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from gpucatalog.core import errors

# apiVersion of every versioned document gpu-catalog reads or writes.
API_VERSION = "gpu-catalog.dev/v1alpha1"


@dataclass(frozen=True)
class Document:
    path: Path
    index: int  # 0-based position in a multi-document file
    data: Any
    node: yaml.Node

    def line_of(self, path: Sequence[str | int]) -> int:
        """1-based line of the value at ``path`` (or of the deepest ancestor found)."""
        node: yaml.Node = self.node
        for part in path:
            nxt: yaml.Node | None = None
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                        nxt = v
                        break
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                nxt = node.value[part]
            if nxt is None:
                break
            node = nxt
        return int(node.start_mark.line) + 1


def parse_documents(text: str, path: Path) -> list[Document]:
    """Every non-empty document of ``text`` (read from ``path``); malformed YAML is an InputError
    with the line."""
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        docs = []
        for i, node in enumerate(nodes):
            if node is None:
                continue
            data = yaml.SafeLoader(text).construct_document(node)
            docs.append(Document(path=path, index=i, data=data, node=node))
        return docs
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise errors.InputError(f"malformed YAML: {exc.problem or exc}", path=str(path), line=line) from exc
    except yaml.YAMLError as exc:
        raise errors.InputError(f"malformed YAML: {exc}", path=str(path)) from exc


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError as exc:
        raise errors.NotFoundError("file not found", path=str(path)) from exc
    except OSError as exc:
        raise errors.InputError(f"cannot read: {exc.strerror}", path=str(path)) from exc


def load_documents(path: Path) -> list[Document]:
    return parse_documents(read_text(path), path)


def field_name(path: Sequence[Any]) -> str:
    """``spec.components[0].name`` for a JSON path."""
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(document)"


def schema_message(err: jsonschema.ValidationError) -> str:
    """A violation in a person's words (an unknown field is named)."""
    if err.validator == "additionalProperties":
        return "unknown field " + err.message.split("(", 1)[-1].rstrip(")")
    return err.message


def check_schema(
    doc: Document,
    validator: jsonschema.Draft202012Validator,
    message: Callable[[jsonschema.ValidationError], str] = schema_message,
) -> None:
    """Raise a SchemaError for the most relevant violation of ``doc``, naming its line and field."""
    errs = sorted(validator.iter_errors(doc.data), key=lambda e: (list(e.absolute_path) != [], e.path))
    if not errs:
        return
    err = jsonschema.exceptions.best_match(errs)
    where = list(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        # Point at the unexpected key itself, not at its parent mapping.
        allowed = set(err.schema.get("properties", {}))
        extra = sorted(k for k in err.instance if k not in allowed)
        if extra:
            where.append(extra[0])
    more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
    raise errors.SchemaError(message(err) + more, path=str(doc.path), line=doc.line_of(where), field=field_name(where))


def parse_one(text: str, path: Path, schema: dict[str, Any]) -> dict[str, Any]:
    """The single versioned document of ``text``, checked against ``schema``."""
    docs = parse_documents(text, path)
    kind = schema["properties"]["kind"]["const"]
    if not docs or not isinstance(docs[0].data, dict):
        raise errors.SchemaError("empty or truncated document", path=str(path), expected=f"kind {kind}")
    if len(docs) > 1:
        raise errors.SchemaError("more than one document", path=str(path), line=docs[1].line_of([]),
                                 expected=f"one document of kind {kind}")
    check_schema(docs[0], jsonschema.Draft202012Validator(schema))
    data: dict[str, Any] = docs[0].data
    return data


def load_one(path: Path, schema: dict[str, Any]) -> dict[str, Any]:
    return parse_one(read_text(path), path, schema)


def header(kind: str) -> dict[str, Any]:
    """Schema fragment for ``apiVersion`` + ``kind``."""
    return {"apiVersion": {"const": API_VERSION}, "kind": {"const": kind}}
