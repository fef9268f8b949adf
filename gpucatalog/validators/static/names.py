"""Names the API server would reject, caught before install: label keys and values, annotation
keys, PriorityClass names and the ``priorityClassName`` a pod refers to.

Called by ``validate`` for each object. Rules ``label-syntax`` and ``priority-class-name``. The
syntax is Kubernetes' own (a qualified name with an optional DNS-subdomain prefix; a label value
of at most 63 characters; DNS-1123 subdomains for PriorityClasses, with the ``system-`` prefix
reserved for Kubernetes' own classes). The OpenAPI schema only says "a string", so a bundle
value such as ``priorityClassName: Not_Valid`` renders, validates, and fails at install time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from gpucatalog.core import errors
from gpucatalog.validators.static import objects, target

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def key_problem(key: str) -> str:
    """Why ``key`` is not a valid label or annotation key ('' if it is)."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix:
        return "has more than one '/'"
    if key.count("/") and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        return f"prefix {prefix!r} is not a DNS subdomain (lower case, digits, '-', '.'; at most 253)"
    if not name or len(name) > 63 or not _NAME.match(name):
        return "name part must be 1-63 letters, digits, '-', '_' or '.', starting and ending alphanumeric"
    return ""


def value_problem(value: str) -> str:
    if len(value) > 63:
        return f"is {len(value)} characters long, at most 63 are allowed"
    if value and not _NAME.match(value):
        return "must be empty or letters, digits, '-', '_' or '.', starting and ending alphanumeric"
    return ""


def subdomain_problem(name: str) -> str:
    if len(name) > 253 or not _SUBDOMAIN.match(name):
        return "is not a DNS-1123 subdomain (lower case letters, digits, '-' and '.'; at most 253)"
    return ""


def _labels(t: target.Target, where: tuple[str | int, ...], labels: Any, *, values: bool = True) -> Iterator[errors.Finding]:
    if not isinstance(labels, dict):
        return
    for k, v in labels.items():
        why = key_problem(k) if isinstance(k, str) else "is not a string"
        if why:
            yield t.finding("label-syntax", [*where, str(k)], f"key {k!r} {why}")
        if values and isinstance(v, str) and value_problem(v):
            yield t.finding("label-syntax", [*where, str(k)], f"value {v!r} {value_problem(v)}")


def check(t: target.Target) -> Iterator[errors.Finding]:
    meta = objects.mapping(t.obj, "metadata")
    yield from _labels(t, ("metadata", "labels"), meta.get("labels"))
    yield from _labels(t, ("metadata", "annotations"), meta.get("annotations"), values=False)
    selector = objects.mapping(objects.mapping(t.obj, "spec"), "selector")
    yield from _labels(t, ("spec", "selector", "matchLabels"), selector.get("matchLabels"))
    if t.ident.kind == "PriorityClass" and t.ident.group == "scheduling.k8s.io":
        name = t.ident.name
        if subdomain_problem(name):
            yield t.finding("priority-class-name", ["metadata", "name"], f"{name!r} {subdomain_problem(name)}")
        elif name.startswith("system-"):
            yield t.finding("priority-class-name", ["metadata", "name"],
                            f"{name!r}: the 'system-' prefix is reserved for Kubernetes' own classes")
    tpl = objects.pod_template(t.obj)
    if tpl is None:
        return
    yield from _labels(t, (*tpl.spec_path[:-1], "metadata", "labels"), tpl.metadata.get("labels"))
    pcn = tpl.spec.get("priorityClassName")
    if isinstance(pcn, str) and pcn and subdomain_problem(pcn):
        yield t.finding("priority-class-name", [*tpl.spec_path, "priorityClassName"], f"{pcn!r} {subdomain_problem(pcn)}")
