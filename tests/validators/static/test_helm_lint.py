"""``helm lint`` through the pinned helm binary (built once into the toolchain cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.core import errors
from gpucatalog.validators.static import lint_chart
from gpucatalog.validators.static.lint import parse_output

# A cold toolchain cache builds helm first, which takes minutes.
pytestmark = [pytest.mark.toolchain, pytest.mark.timeout(900)]

CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
data:
  image: {{ .Values.image | quote }}
"""


def chart(root: Path, chart_yaml: str = "apiVersion: v2\nname: demo\nversion: 0.1.0\n") -> Path:
    d = root / "demo"
    (d / "templates").mkdir(parents=True)
    (d / "Chart.yaml").write_text(chart_yaml)
    (d / "values.yaml").write_text("image: app:1.0\n")
    (d / "templates" / "cm.yaml").write_text(CONFIGMAP)
    return d


def test_clean_chart_has_no_findings(tmp_path):
    d = chart(tmp_path)
    values = tmp_path / "ci-values.yaml"
    values.write_text("image: app:2.0\n")
    assert lint_chart(d, [values], kube_version="1.36.3") == []


def test_template_error_names_file_and_line(tmp_path):
    d = chart(tmp_path)
    (d / "templates" / "bad.yaml").write_text("kind: ConfigMap\ndata:\n  x: {{ .Values.image.tag.name }}\n")
    found = lint_chart(d, [], component="team-queues")
    assert [(f.rule, f.component, f.obj, f.field) for f in found] == [
        ("helm-lint", "team-queues", "templates/bad.yaml", "line 3")
    ]
    assert found[0].message.startswith("error: ")


def test_values_checked_against_values_schema(tmp_path):
    d = chart(tmp_path)
    (d / "values.schema.json").write_text(
        '{"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 0}}}'
    )
    good = tmp_path / "good.yaml"
    good.write_text("replicas: 2\n")
    assert lint_chart(d, [good]) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text("replicas: -1\n")
    found = lint_chart(d, [good, bad])
    assert found and all(f.rule == "helm-lint" and f.component == "demo" for f in found)
    assert any("replicas" in f.message for f in found)


def test_bad_chart_metadata(tmp_path):
    d = chart(tmp_path, "apiVersion: v2\nname: demo\nversion: not-semver\n")
    found = lint_chart(d)
    assert found and all(f.rule == "helm-lint" for f in found)
    assert any("not-semver" in f.message for f in found)


def test_missing_chart_or_values_is_input_error(tmp_path):
    with pytest.raises(errors.NotFoundError, match="no Chart.yaml"):
        lint_chart(tmp_path / "nothing")
    with pytest.raises(errors.NotFoundError, match="does not exist"):
        lint_chart(chart(tmp_path), [tmp_path / "missing.yaml"])


def test_parse_output_joins_continuation_lines():
    text = (
        "==> Linting demo\n"
        "[INFO] Chart.yaml: icon is recommended\n"
        "[ERROR] templates/: demo/templates/bad.yaml:6:15\n"
        '  executing "demo/templates/bad.yaml" at <.Values.x>:\n'
        "    can't evaluate field x\n"
        "\n"
        "[WARNING] Chart.yaml: version '1' is not a valid SemVerV2\n"
        "Error: 1 chart(s) linted, 1 chart(s) failed\n"
    )
    found = parse_output("demo", text)
    assert [(f.obj, f.field) for f in found] == [("templates/bad.yaml", "line 6"), ("Chart.yaml", "")]
    assert found[0].message.endswith("can't evaluate field x")
    assert found[1].message == "warning: version '1' is not a valid SemVerV2"
