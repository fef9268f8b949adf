"""Loading the catalog: schemas, line numbers, and every kind of bad input (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucatalog.catalog import loader, resolve
from gpucatalog.cli import main
from gpucatalog.core import errors


def test_loads_components_versions_and_bundles(mini_catalog: Path) -> None:
    cat = loader.load_catalog(mini_catalog)
    assert set(cat.components) == {"alpha", "beta"}
    assert ("mini", "0.1.0") in cat.bundles
    assert cat.versions[("alpha", "1.0.0")].chart.path == "charts/demo"


def test_dependency_order_puts_dependencies_first(mini_catalog: Path) -> None:
    plan = resolve.plan(loader.load_catalog(mini_catalog), "mini", "sim")
    assert [s.entry.name for s in plan.steps] == ["alpha", "beta"]


def test_schema_violation_names_file_line_and_field(mini_catalog: Path) -> None:
    f = mini_catalog / "components" / "alpha" / "1.0.0.yaml"
    f.write_text(f.read_text().replace("kubernetes:", "kubernetez:"))
    with pytest.raises(errors.SchemaError) as exc:
        loader.load_catalog(mini_catalog)
    msg = str(exc.value)
    assert f"{f}:" in msg and "unknown field" in msg and "kubernetez" in msg
    assert exc.value.line == 6


def test_malformed_yaml_reports_line(mini_catalog: Path) -> None:
    f = mini_catalog / "bundles" / "mini" / "0.1.0.yaml"
    f.write_text(f.read_text() + "  bad: [unclosed\n")
    with pytest.raises(errors.InputError) as exc:
        loader.load_catalog(mini_catalog)
    assert "malformed YAML" in str(exc.value) and exc.value.line is not None


def test_unknown_kind_is_bad_input(mini_catalog: Path) -> None:
    (mini_catalog / "bundles" / "x.yaml").write_text("apiVersion: gpu-catalog.dev/v1alpha1\nkind: Gizmo\n")
    with pytest.raises(errors.SchemaError, match="unknown kind 'Gizmo'"):
        loader.load_catalog(mini_catalog)


def test_duplicate_component_in_bundle(mini_catalog: Path) -> None:
    f = mini_catalog / "bundles" / "mini" / "0.1.0.yaml"
    f.write_text(f.read_text().replace("- {name: alpha, version: 1.0.0, namespace: demo}", "- {name: beta, version: 1.0.0, namespace: demo}"))
    with pytest.raises(errors.InputError, match="appears twice"):
        loader.load_catalog(mini_catalog)


def test_dependency_cycle(mini_catalog: Path) -> None:
    f = mini_catalog / "bundles" / "mini" / "0.1.0.yaml"
    f.write_text(f.read_text().replace("{name: alpha, version: 1.0.0, namespace: demo}", "{name: alpha, version: 1.0.0, namespace: demo, dependsOn: [beta]}"))
    cat = loader.load_catalog(mini_catalog)
    with pytest.raises(errors.InputError, match="dependency cycle: .*alpha -> beta -> alpha|beta -> alpha -> beta"):
        resolve.plan(cat, "mini", "sim")


@pytest.mark.parametrize(
    ("ref", "profile", "needle"),
    [
        ("nope", "sim", "unknown bundle 'nope'"),
        ("mini@9.9.9", "sim", "unknown version '9.9.9' of bundle 'mini'"),
        ("mini", "gke", "has no profile 'gke'"),
    ],
)
def test_unknown_names(mini_catalog: Path, ref: str, profile: str, needle: str) -> None:
    with pytest.raises(errors.NotFoundError, match=needle):
        resolve.plan(loader.load_catalog(mini_catalog), ref, profile)


def test_unknown_component_version(mini_catalog: Path) -> None:
    f = mini_catalog / "bundles" / "mini" / "0.1.0.yaml"
    f.write_text(f.read_text().replace("{name: alpha, version: 1.0.0", "{name: alpha, version: 2.0.0"))
    with pytest.raises(errors.NotFoundError, match="unknown version '2.0.0' of component 'alpha'"):
        resolve.plan(loader.load_catalog(mini_catalog), "mini", "sim")


def test_cli_exit_code_2_on_bad_input(mini_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--catalog-dir", str(mini_catalog), "show", "nope"]) == 2
    assert "unknown bundle 'nope'" in capsys.readouterr().err


def test_cli_show_json(mini_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--catalog-dir", str(mini_catalog), "show", "mini", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"name": "alpha"' in out and out.index('"alpha"') < out.index('"beta"')


def test_log_patterns_are_loaded_and_a_bad_regex_is_bad_input(mini_catalog: Path) -> None:
    f = mini_catalog / "components" / "alpha" / "1.0.0.yaml"
    text = f.read_text()
    f.write_text(text + "  declarations:\n    logPatterns: {'(?i)forbidden': 'an RBAC denial of alpha'}\n"
                 "    logNamespaces: [alpha-extra]\n")
    decl = loader.load_catalog(mini_catalog).versions[("alpha", "1.0.0")].declarations
    assert decl.log_patterns == {"(?i)forbidden": "an RBAC denial of alpha"} and decl.log_namespaces == ("alpha-extra",)
    f.write_text(text + "  declarations:\n    logPatterns: {'(unclosed': 'an RBAC denial of alpha'}\n")
    with pytest.raises(errors.InputError) as exc:
        loader.load_catalog(mini_catalog)
    assert "log pattern '(unclosed' is not a regular expression" in str(exc.value)
    assert exc.value.path == str(f) and exc.value.field == "spec.declarations.logPatterns"
