"""Label keys and values, annotation keys and PriorityClass names the API server would reject are
findings of ``validate`` (issue 14), each of which fails a bundle that rendered fine before."""

from __future__ import annotations

from typing import Any

import pytest

from gpucatalog.validators.static import names, validate_objects
from gpucatalog.validators.static.types import ComponentObjects, PolicyConfig


def _find(*objs: dict[str, Any]) -> list[str]:
    comp = ComponentObjects(name="c", namespace="ns", objects=list(objs))
    return [f"{f.rule} {f.field}: {f.message}" for f in validate_objects([comp], "1.36.3", PolicyConfig())
            if f.rule in ("label-syntax", "priority-class-name")]


def _cm(labels: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x", "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


@pytest.mark.parametrize(("key", "ok"), [
    ("app", True), ("app.kubernetes.io/name", True), ("a_b.c-d", True), ("x" * 63, True),
    ("x" * 64, False), ("-app", False), ("app/", False), ("/app", False), ("Bad.Prefix/app", False),
    ("a/b/c", False), ("has space", False), ("", False),
])
def test_label_keys(key: str, ok: bool) -> None:
    assert (names.key_problem(key) == "") is ok
    assert bool(_find(_cm({key: "v"}))) is not ok


@pytest.mark.parametrize(("value", "ok"), [
    ("", True), ("v1.2_3-x", True), ("x" * 63, True), ("x" * 64, False), ("has spaces!", False), ("-x", False),
])
def test_label_values(value: str, ok: bool) -> None:
    assert bool(_find(_cm({"app": value}))) is not ok


def test_annotation_keys_checked_values_free() -> None:
    assert _find(_cm({}, {"example.com/ok": "any text at all, even long " * 10})) == []
    assert _find(_cm({}, {"Bad Key": "x"}))


def test_priority_class_names() -> None:
    pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": 1}
    assert _find({**pc, "metadata": {"name": "train"}}) == []
    assert "is not a DNS-1123 subdomain" in _find({**pc, "metadata": {"name": "Train_Jobs"}})[0]
    assert "reserved" in _find({**pc, "metadata": {"name": "system-mine"}})[0]


def test_pod_template_labels_and_priority_class_name() -> None:
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "d"},
          "spec": {"selector": {"matchLabels": {"app": "d"}},
                   "template": {"metadata": {"labels": {"app": "d", "tier": "bad value"}},
                                "spec": {"priorityClassName": "Not_A_Valid/Name",
                                         "containers": [{"name": "c", "image": "i@sha256:" + "0" * 64,
                                                         "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]}}}}
    found = _find(ds)
    assert any(f.startswith("label-syntax spec.template.metadata.labels.tier") for f in found)
    assert any(f.startswith("priority-class-name spec.template.spec.priorityClassName") for f in found)
