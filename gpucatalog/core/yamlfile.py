"""Read YAML documents while remembering where each value came from, so schema errors can say
``file:line: field: problem``. Used by ``catalog.loader`` and anything else that validates YAML."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpucatalog.core import errors


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


def load_documents(path: Path) -> list[Document]:
    """Every non-empty document of ``path``; malformed YAML is an InputError with the line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise errors.InputError(f"cannot read: {exc.strerror}", path=str(path)) from exc
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
