"""Helpers over rendered Kubernetes objects (plain dicts): identity, field paths, pod templates.

Used by every check of ``gpucatalog.validators.static`` so that all findings name objects and
fields the same way: objects as ``Kind/namespace/name`` (``Kind/name`` when cluster-scoped) and
fields as JSON paths like ``spec.template.spec.containers[0].image``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")

# Where each workload kind keeps its pod spec (and the pod metadata beside it).
_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "PodTemplate": ("template",),
    "Deployment": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}

CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def field_path(parts: Iterable[str | int]) -> str:
    """``["spec", "containers", 0, "image"]`` -> ``spec.containers[0].image``.

    Keys that are not plain identifiers (annotation keys with dots or slashes) are quoted:
    ``metadata.annotations["a.b/c"]``.
    """
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _PLAIN_KEY.match(p):
            out += ("." if out else "") + p
        else:
            out += f'["{p}"]'
    return out


def split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> (``apps``, ``v1``); ``v1`` -> (``""``, ``v1``)."""
    if "/" in api_version:
        group, _, version = api_version.partition("/")
        return group, version
    return "", api_version


def gvk_key(group: str, version: str, kind: str) -> str:
    """The one spelling of a group/version/kind used as a dictionary key: ``apps/v1/Deployment``."""
    return f"{group}/{version}/{kind}" if group else f"{version}/{kind}"


@dataclass(frozen=True)
class Identity:
    api_version: str
    kind: str
    name: str
    namespace: str  # "" for cluster-scoped objects

    @property
    def group(self) -> str:
        return split_api_version(self.api_version)[0]

    @property
    def version(self) -> str:
        return split_api_version(self.api_version)[1]

    @property
    def gvk(self) -> str:
        return gvk_key(self.group, self.version, self.kind)

    @property
    def ref(self) -> str:
        """What findings print: ``Kind/namespace/name`` or ``Kind/name``."""
        if self.namespace:
            return f"{self.kind}/{self.namespace}/{self.name}"
        return f"{self.kind}/{self.name}"

    @property
    def short(self) -> str:
        """``Kind/name``: the key components use in their declarations."""
        return f"{self.kind}/{self.name}"


def str_field(obj: dict[str, Any], *keys: str) -> str:
    """A nested string field, or ``""`` when absent or not a string."""
    cur: Any = obj
    for k in keys:
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(k)
    return cur if isinstance(cur, str) else ""


def mapping(node: dict[str, Any], key: str) -> dict[str, Any]:
    """``node[key]`` when it is a mapping, else an empty one (schema checks report the type)."""
    value = node.get(key)
    return value if isinstance(value, dict) else {}


def sequence(node: dict[str, Any], key: str) -> list[Any]:
    """``node[key]`` when it is a list, else an empty one."""
    value = node.get(key)
    return value if isinstance(value, list) else []


def strip_nulls(value: Any) -> Any:
    """A copy without ``null`` map values.

    The API server treats an explicit null like an absent field (and prunes nulls of CRD fields
    that are not nullable), and templates print ``creationTimestamp: null`` and ``resources: null``
    routinely, so nulls must not be schema errors. Nulls inside lists stay: those are errors.
    """
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


@dataclass(frozen=True)
class PodTemplate:
    """A pod spec inside a workload, with the path of the spec and the pod's metadata."""

    spec: dict[str, Any]
    spec_path: tuple[str | int, ...]
    metadata: dict[str, Any]


def pod_template(obj: dict[str, Any]) -> PodTemplate | None:
    """The pod spec of a Pod or of a workload's pod template, or None for other kinds."""
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in _POD_SPEC_PATHS:
        return None
    cur: Any = obj
    for k in _POD_SPEC_PATHS[kind]:
        cur = cur.get(k) if isinstance(cur, dict) else None
    if not isinstance(cur, dict):
        return None
    spec = cur.get("spec")
    if not isinstance(spec, dict):
        return None
    meta = cur.get("metadata")
    return PodTemplate(spec, (*_POD_SPEC_PATHS[kind], "spec"), meta if isinstance(meta, dict) else {})


def containers(tpl: PodTemplate) -> Iterator[tuple[tuple[str | int, ...], dict[str, Any]]]:
    """(path, container) for every init, regular and ephemeral container of a pod template."""
    for list_name in CONTAINER_LISTS:
        items = tpl.spec.get(list_name)
        if not isinstance(items, list):
            continue
        for i, c in enumerate(items):
            if isinstance(c, dict):
                yield (*tpl.spec_path, list_name, i), c
