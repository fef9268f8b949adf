"""Rendering through the real helm binary: determinism, value layering, locks, bad input."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
import yaml

from gpucatalog.catalog import charts, loader, render
from gpucatalog.cli import main
from gpucatalog.core import errors

pytestmark = pytest.mark.toolchain  # renders with the pinned helm


def _replicas(rb: render.RenderedBundle, comp: str) -> int:
    c = next(c for c in rb.components if c.name == comp)
    return int(c.objects[0]["spec"]["replicas"])


def test_render_twice_is_byte_identical(mini_catalog: Path, tmp_path: Path) -> None:
    cat = loader.load_catalog(mini_catalog)
    a = render.render_bundle(cat, "mini", "sim", tmp_path / "a")
    b = render.render_bundle(cat, "mini", "sim", tmp_path / "b")
    assert a.digest == b.digest and a.digest.startswith("sha256:")
    for name in ("bundle.lock.json", "alpha/manifests.yaml", "beta/manifests.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_values_layering_component_bundle_profile(mini_catalog: Path) -> None:
    cat = loader.load_catalog(mini_catalog)
    rb = render.render_bundle(cat, "mini", "sim")
    assert _replicas(rb, "alpha") == 3  # profile overlay wins
    assert _replicas(rb, "beta") == 2  # bundle value over chart default
    assert _replicas(render.render_bundle(cat, "mini", "kind"), "alpha") == 1  # chart default
    assert render.render_bundle(cat, "mini", "kind").digest != rb.digest


def test_lock_records_every_input_digest(mini_catalog: Path, tmp_path: Path) -> None:
    rb = render.render_bundle(loader.load_catalog(mini_catalog), "mini", "sim", tmp_path / "r")
    lock = json.loads((tmp_path / "r" / "bundle.lock.json").read_text())
    assert lock["digest"] == rb.digest
    assert lock["kubernetesVersion"] == "1.36.3"
    comp = lock["components"][0]
    for key in ("chart", "values", "output"):
        assert comp[key]["digest"].startswith("sha256:")
    assert comp["images"] == [{"name": "app", "ref": "example.invalid/demo:1.0", "digest": None}]


def test_chart_change_changes_digest(mini_catalog: Path) -> None:
    cat = loader.load_catalog(mini_catalog)
    before = render.render_bundle(cat, "mini", "sim").digest
    tpl = mini_catalog.parent / "charts" / "demo" / "templates" / "deploy.yaml"
    tpl.write_text(tpl.read_text().replace("app: {{ .Release.Name }}}}", "app: {{ .Release.Name }}, tier: x}}", 1))
    assert render.render_bundle(cat, "mini", "sim").digest != before


def test_values_violating_chart_schema_is_bad_input_and_writes_nothing(
    mini_catalog: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = mini_catalog / "bundles" / "mini" / "0.1.0.yaml"
    f.write_text(f.read_text().replace("values: {replicas: 2}", "values: {replicas: -2}"))
    out = tmp_path / "out"
    assert main(["--catalog-dir", str(mini_catalog), "render", "mini", "--profile", "sim", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "values.schema.json" in err and "replicas" in err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def _remote_catalog(mini_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digest: str | None) -> Path:
    cache = tmp_path / "chart-cache"
    cache.mkdir()
    tgz = cache / "demo-0.1.0.tgz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(mini_catalog.parent / "charts" / "demo", arcname="demo")
    monkeypatch.setenv("CATALOG_CHART_CACHE", str(cache))
    f = mini_catalog / "components" / "alpha" / "1.0.0.yaml"
    pinned = digest or charts.sha256_file(tgz)
    f.write_text(
        f.read_text().replace(
            "chart: {path: charts/demo}",
            f"chart: {{url: 'oci://registry.invalid/charts/demo', version: 0.1.0, digest: '{pinned}'}}",
        )
    )
    return tgz


def test_remote_chart_from_cache_with_matching_digest(
    mini_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tgz = _remote_catalog(mini_catalog, tmp_path, monkeypatch, None)
    rb = render.render_bundle(loader.load_catalog(mini_catalog), "mini", "sim")
    assert rb.lock["components"][0]["chart"]["digest"] == charts.sha256_file(tgz)
    assert _replicas(rb, "alpha") == 3


def test_remote_chart_digest_mismatch_is_refused(
    mini_catalog: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _remote_catalog(mini_catalog, tmp_path, monkeypatch, "sha256:" + "0" * 64)
    with pytest.raises(errors.InputError, match="chart digest mismatch"):
        render.render_bundle(loader.load_catalog(mini_catalog), "mini", "sim")


def test_kustomize_overlay_is_applied_and_locked(mini_catalog: Path) -> None:
    f = mini_catalog / "bundles" / "mini" / "0.1.0.yaml"
    patch = {"target": {"kind": "Deployment"}, "patch": yaml.safe_dump([{"op": "add", "path": "/metadata/labels", "value": {"team": "ml"}}])}
    f.write_text(f.read_text().replace("kind: {}", "kind: {kustomize: {alpha: {patches: [" + json.dumps(patch) + "]}}}"))
    cat = loader.load_catalog(mini_catalog)
    rb = render.render_bundle(cat, "mini", "kind")
    alpha = next(c for c in rb.components if c.name == "alpha")
    assert alpha.objects[0]["metadata"]["labels"] == {"team": "ml"}
    assert rb.lock["components"][0]["kustomize"]["digest"].startswith("sha256:")


def test_diff_shows_rendered_changes_between_versions(mini_catalog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = mini_catalog / "bundles" / "mini" / "0.1.0.yaml"
    (mini_catalog / "bundles" / "mini" / "0.2.0.yaml").write_text(
        src.read_text().replace("version: 0.1.0}", "version: 0.2.0}").replace("{alpha: {replicas: 3}}", "{alpha: {replicas: 5}}")
    )
    assert main(["--catalog-dir", str(mini_catalog), "diff", "mini@0.1.0", "mini@0.2.0", "--profile", "sim"]) == 0
    out = capsys.readouterr().out
    assert "--- mini@0.1.0/alpha" in out and "-  replicas: 3" in out and "+  replicas: 5" in out
    assert "mini@0.1.0/beta" not in out  # unchanged component: no hunk
    assert main(["--catalog-dir", str(mini_catalog), "list", "--json"]) == 0
    assert '"0.2.0"' in capsys.readouterr().out


def _changed(cat: object, field: str) -> object:
    """``cat`` with one thing certification depends on changed, the rendered objects untouched."""
    import dataclasses

    from gpucatalog.catalog import model

    assert isinstance(cat, model.Catalog)
    key = next(k for k in cat.bundles if k[0] == "mini")
    b = cat.bundles[key]
    sim = b.profiles["sim"]
    if field == "suites":
        b = dataclasses.replace(b, suites=(*b.suites, "gang"))
    elif field == "suite parameter":
        sim = dataclasses.replace(sim, suite_params={"fault_remediation": {"xid": 79}})
    elif field == "node count":
        sim = dataclasses.replace(sim, cluster={**sim.cluster, "nodes": int(sim.cluster.get("nodes", 4)) + 1})
    elif field == "cluster shape":
        sim = dataclasses.replace(sim, cluster={**sim.cluster, "shape": "a100-40gb-x8"})
    elif field == "declared log lines":
        versions = dict(cat.versions)
        cv = versions[("alpha", "1.0.0")]
        versions[("alpha", "1.0.0")] = dataclasses.replace(cv, declarations=dataclasses.replace(
            cv.declarations, log_patterns={"panic:": "a crash"}))
        return dataclasses.replace(cat, versions=versions)
    b = dataclasses.replace(b, profiles={**b.profiles, "sim": sim})
    return dataclasses.replace(cat, bundles={**cat.bundles, key: b})


@pytest.mark.parametrize("field", ["suites", "suite parameter", "node count", "cluster shape", "declared log lines"])
def test_the_digest_covers_what_certification_depends_on(mini_catalog: Path, field: str) -> None:
    """Issue 25 attack 2: changing the suites, a suite parameter or the cluster shape left the
    digest unchanged, so evidence made under weaker conditions stayed valid."""
    cat = loader.load_catalog(mini_catalog)
    before = render.render_bundle(cat, "mini", "sim")
    after = render.render_bundle(_changed(cat, field), "mini", "sim")  # type: ignore[arg-type]
    assert [c.manifest_text for c in after.components] == [c.manifest_text for c in before.components]
    assert after.digest != before.digest, f"changing the {field} kept the digest"
