"""A small, self-contained catalog (one chart, two components, one bundle) built per test."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

CHART_YAML = "apiVersion: v2\nname: demo\nversion: 0.1.0\nappVersion: '1.0'\n"
DEPLOY = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}
  namespace: {{ .Release.Namespace }}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: {{ .Release.Name }}}}
  template:
    metadata: {labels: {app: {{ .Release.Name }}}}
    spec:
      containers:
        - name: app
          image: {{ .Values.image }}
          resources: {requests: {cpu: 10m, memory: 16Mi}}
"""
SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"replicas": {"type": "integer", "minimum": 0}, "image": {"type": "string"}},
}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def mini_catalog(tmp_path: Path) -> Path:
    """Repo-shaped folder: charts/demo and catalog/{components,bundles}; returns catalog/."""
    chart = tmp_path / "charts" / "demo"
    write(chart / "Chart.yaml", CHART_YAML)
    write(chart / "values.yaml", "replicas: 1\nimage: example.invalid/demo:1.0\n")
    (chart / "values.schema.json").write_text(json.dumps(SCHEMA))
    write(chart / "templates" / "deploy.yaml", DEPLOY)
    cat = tmp_path / "catalog"
    for name in ("alpha", "beta"):
        write(
            cat / "components" / name / "component.yaml",
            f"""\
            apiVersion: gpu-catalog.dev/v1alpha1
            kind: Component
            metadata: {{name: {name}}}
            spec: {{description: the {name} component}}
            """,
        )
        write(
            cat / "components" / name / "1.0.0.yaml",
            f"""\
            apiVersion: gpu-catalog.dev/v1alpha1
            kind: ComponentVersion
            metadata: {{name: {name}, version: 1.0.0}}
            spec:
              chart: {{path: charts/demo}}
              kubernetes: ">=1.30.0 <1.37.0"
              images: [{{name: app, ref: "example.invalid/demo:1.0"}}]
            """,
        )
    write(
        cat / "bundles" / "mini" / "0.1.0.yaml",
        """\
        apiVersion: gpu-catalog.dev/v1alpha1
        kind: Bundle
        metadata: {name: mini, version: 0.1.0}
        spec:
          description: two demo components
          kubernetesVersion: 1.36.3
          components:
            - {name: beta, version: 1.0.0, namespace: demo, dependsOn: [alpha], values: {replicas: 2}}
            - {name: alpha, version: 1.0.0, namespace: demo}
          profiles:
            sim: {values: {alpha: {replicas: 3}}}
            kind: {}
        """,
    )
    return cat
