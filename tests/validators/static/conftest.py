"""Hand-written rendered objects (good ones; each test breaks one thing) and a validate helper."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from gpucatalog.core import errors
from gpucatalog.validators.static import ComponentObjects, PolicyConfig, validate_objects

KUBE = "1.36"

DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "labels": {"app": "web"}, "creationTimestamp": None},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "serviceAccountName": "web",
                "containers": [
                    {
                        "name": "app",
                        "image": "registry.example/team/web:1.4.2",
                        "args": ["--port=8080"],
                        "env": [{"name": "MODE", "value": "prod"}],
                        "ports": [{"name": "http", "containerPort": 8080}],
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "64Mi"},
                            "limits": {"memory": "1Gi"},
                        },
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                    }
                ],
            },
        },
    },
}


@pytest.fixture
def deployment() -> dict[str, Any]:
    """A Deployment that passes every check at Pod Security baseline."""
    return copy.deepcopy(DEPLOYMENT)


Validate = Callable[..., list[errors.Finding]]


@pytest.fixture
def validate() -> Validate:
    def run(
        objs: list[dict[str, Any]],
        *,
        privileged: dict[str, str] | None = None,
        rbac_wildcards: dict[str, str] | None = None,
        pod_security: dict[str, Any] | None = None,
        policy: PolicyConfig | None = None,
        extra: list[ComponentObjects] | None = None,
    ) -> list[errors.Finding]:
        comp = ComponentObjects(
            name="demo",
            namespace="demo-ns",
            objects=objs,
            privileged=privileged or {},
            rbac_wildcards=rbac_wildcards or {},
            pod_security=pod_security or {},
        )
        return validate_objects([comp, *(extra or [])], KUBE, policy or PolicyConfig())

    return run


def _where(findings: list[errors.Finding]) -> set[tuple[str, str, str]]:
    return {(f.rule, f.obj, f.field) for f in findings}


@pytest.fixture
def where() -> Callable[[list[errors.Finding]], set[tuple[str, str, str]]]:
    """(rule, object, field) of each finding: what the tests compare."""
    return _where
