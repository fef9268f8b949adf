"""Read YAML documents strictly while remembering where each value came from, and check them
against a JSON Schema, so every problem is reported as ``file:line: field: problem`` (exit 2).

Called by ``catalog.loader`` (multi-document catalog files, one schema per kind), by
``catalog.charts`` (Chart.yaml, values.yaml) and by the pipelines' single-document files (trust
file, promotion policy, channel) through :func:`load_one`.

Strict means what plain PyYAML lets through is refused before anything is built from it:

- a mapping with the same key twice (PyYAML keeps the last one silently: a second
  ``kubernetesVersion`` or ``entries`` would quietly replace the first);
- aliases that expand past :data:`MAX_NODES` nodes (a "billion laughs" block is small on disk
  and exhausts memory once serialised) or that refer to themselves;
- a file that is not a regular file, larger than :data:`MAX_BYTES`, or not UTF-8.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from gpucatalog.core import errors

# apiVersion of every versioned document gpu-catalog reads or writes.
API_VERSION = "gpu-catalog.dev/v1alpha1"
# Nodes a document may have once every alias is expanded: the largest shipped catalog file has
# about 400; a billion-laughs block has 10^9.
MAX_NODES = 100_000
# Bytes a YAML file may have (the largest shipped one has about 4 KiB).
MAX_BYTES = 4 << 20


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


def _strict(node: yaml.Node, path: Path) -> None:
    """Refuse duplicate keys, self-referring aliases and alias expansion past ``MAX_NODES``.

    Sizes are memoised per node, so the walk costs the file's size, not the expansion's."""
    sizes: dict[int, int] = {}
    visiting: set[int] = set()

    def size(n: yaml.Node) -> int:
        key = id(n)
        if key in sizes:
            return sizes[key]
        if key in visiting:
            raise errors.InputError("an alias refers to the node that contains it (recursive YAML)",
                                    path=str(path), line=int(n.start_mark.line) + 1)
        visiting.add(key)
        total = 1
        if isinstance(n, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for k, v in n.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    if (k.tag, k.value) in seen:
                        raise errors.InputError(
                            f"duplicate key {k.value!r} (first at line {seen[(k.tag, k.value)]}); YAML would "
                            "silently keep only the last one", path=str(path), line=int(k.start_mark.line) + 1,
                            field=k.value)
                    seen[(k.tag, k.value)] = int(k.start_mark.line) + 1
                total += size(k) + size(v)
        elif isinstance(n, yaml.SequenceNode):
            total += sum(size(item) for item in n.value)
        if total > MAX_NODES:
            raise errors.InputError(
                f"YAML expands to more than {MAX_NODES} nodes (aliases repeated inside aliases?)",
                path=str(path), line=int(n.start_mark.line) + 1)
        visiting.discard(key)
        sizes[key] = total
        return total

    size(node)


def parse_documents(text: str, path: Path) -> list[Document]:
    """Every non-empty document of ``text`` (read from ``path``); malformed or non-strict YAML
    (see the module docstring) is an InputError with the line."""
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        docs = []
        for i, node in enumerate(nodes):
            if node is None:
                continue
            _strict(node, path)
            data = yaml.SafeLoader(text).construct_document(node)
            docs.append(Document(path=path, index=i, data=data, node=node))
        return docs
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise errors.InputError(f"malformed YAML: {exc.problem or exc}", path=str(path), line=line) from exc
    except yaml.YAMLError as exc:
        raise errors.InputError(f"malformed YAML: {exc}", path=str(path)) from exc
    except RecursionError as exc:
        raise errors.InputError("YAML nested too deeply", path=str(path)) from exc


def parse_data(text: str, path: Path) -> Any:
    """The data of a file holding at most one document (``None`` when empty), read strictly."""
    docs = parse_documents(text, path)
    if len(docs) > 1:
        raise errors.InputError("more than one YAML document", path=str(path), line=docs[1].line_of([]))
    return docs[0].data if docs else None


def read_bytes(path: Path, limit: int = MAX_BYTES, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes: a folder, a device such as
    /dev/zero, a FIFO or an oversized file is bad input, never an endless read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise errors.NotFoundError(f"{what} not found", path=str(path)) from exc
    except OSError as exc:
        raise errors.InputError(f"cannot read {what}: {exc.strerror}", path=str(path)) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise errors.InputError(f"{what} is {kind}", path=str(path), expected="a regular file")
        if st.st_size > limit:
            raise errors.InputError(f"{what} is {st.st_size} bytes, more than the {limit} allowed", path=str(path))
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise errors.InputError(f"cannot read {what}: {exc.strerror}", path=str(path)) from exc
    finally:
        os.close(fd)
    if len(data) > limit:
        raise errors.InputError(f"{what} grew past the {limit} bytes allowed while being read", path=str(path))
    return data


def decode(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise errors.InputError(f"not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x})",
                                path=str(path), expected="a UTF-8 YAML file") from exc


def read_text(path: Path) -> str:
    return decode(read_bytes(path), path)


def load_documents(path: Path) -> list[Document]:
    return parse_documents(read_text(path), path)


def load_data(path: Path) -> Any:
    return parse_data(read_text(path), path)


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
