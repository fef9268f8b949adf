"""``catalog render --format argocd|flux|helmfile`` (issue 28, item 1): the GitOps forms of a
certified render pin each chart and carry the render's values, in ``dependsOn`` order; their
chart + values give exactly the objects ``install`` applies; their Argo CD and Flux objects match
the pinned CRDs, both by schema and on a real API server (server-side dry run)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.catalog import gitops, loader, model, render
from gpucatalog.cli import main
from gpucatalog.core import errors, executor
from gpucatalog.toolchain import build
from gpucatalog.validators.static import gitops_crds
from tests.validators.conformance.apiserver import api_server

pytestmark = [pytest.mark.toolchain, pytest.mark.timeout(600)]  # renders with the pinned helm

REGISTRY = "oci://127.0.0.1:5000/catalog"
REF = "gpu-queueing@0.2.0"


@pytest.fixture(scope="module")
def cat() -> model.Catalog:
    return loader.load_catalog(None)


@pytest.fixture(scope="module")
def rb(cat: model.Catalog) -> render.RenderedBundle:
    return render.render_bundle(cat, REF, "sim")


@pytest.fixture(scope="module")
def packaged(rb: render.RenderedBundle, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """(chart name, version) -> the chart archive `catalog publish` would push (``helm package``)."""
    out = tmp_path_factory.mktemp("charts")
    for c in rb.components:
        executor.run([build.ensure("helm"), "package", c.chart_dir, "--destination", out])
    found: dict[tuple[str, str], Path] = {}
    for tgz in out.glob("*.tgz"):
        name, _, version = tgz.stem.rpartition("-")
        found[(name, version)] = tgz
    return found


def _releases(fmt: str, files: dict[str, str]) -> list[dict[str, Any]]:
    """What each generated object tells its tool to render: chart, version, release, namespace, values."""
    if fmt == "helmfile":
        doc = yaml.safe_load(files["helmfile.yaml"])
        return [{"chart": r["chart"].split("/", 1)[1], "version": r["version"], "release": r["name"],
                 "namespace": r["namespace"], "values": r["values"][0]} for r in doc["releases"]]
    objs = gitops.objects(files)
    if fmt == "argocd":
        return [{"chart": o["spec"]["source"]["chart"], "version": o["spec"]["source"]["targetRevision"],
                 "release": o["spec"]["source"]["helm"]["releaseName"],
                 "namespace": o["spec"]["destination"]["namespace"],
                 "values": o["spec"]["source"]["helm"]["valuesObject"]} for o in objs]
    sources = {o["metadata"]["name"]: o for o in objs if o["kind"] == "OCIRepository"}
    out = []
    for o in (o for o in objs if o["kind"] == "HelmRelease"):
        src = sources[o["spec"]["chartRef"]["name"]]
        assert src["spec"]["url"].startswith(REGISTRY + "/")
        out.append({"chart": src["spec"]["url"].rsplit("/", 1)[1], "version": src["spec"]["ref"]["tag"],
                    "release": o["spec"]["releaseName"], "namespace": o["spec"]["targetNamespace"],
                    "values": o["spec"]["values"]})
    return out


@pytest.mark.parametrize("fmt", ["argocd", "flux", "helmfile"])
def test_chart_and_values_render_exactly_the_bundle(
    fmt: str, cat: model.Catalog, rb: render.RenderedBundle, packaged: dict[tuple[str, str], Path]
) -> None:
    """Object by object: each generated release's chart (as published) + values, rendered with the
    pinned helm as render.py does, gives the RenderedBundle's objects for that component."""
    files = gitops.generate(cat, rb, fmt, REGISTRY)
    releases = {r["release"]: r for r in _releases(fmt, files)}
    assert sorted(releases) == sorted(c.release for c in rb.components)
    for c in rb.components:
        r = releases[c.release]
        assert r["namespace"] == c.namespace
        assert r["version"] == rb.lock_component(c.name)["chart"]["version"]
        objs = render.helm_template(c.release, str(packaged[(r["chart"], r["version"])]), r["namespace"],
                                    rb.kube_version, r["values"])
        objs = sorted(objs, key=render._kind_rank)
        assert len(objs) == len(c.objects), c.name
        for got, want in zip(objs, c.objects, strict=True):
            assert got == want, f"{c.name}: {want.get('kind')}/{want.get('metadata', {}).get('name')}"


def test_order_follows_depends_on(cat: model.Catalog, rb: render.RenderedBundle) -> None:
    argo = gitops.objects(gitops.generate(cat, rb, "argocd", REGISTRY))
    wave = {o["metadata"]["name"]: o["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] for o in argo}
    assert wave["gpu-queueing-kueue"] == "0" and wave["gpu-queueing-team-queues"] == "1"
    flux = [o for o in gitops.objects(gitops.generate(cat, rb, "flux", REGISTRY)) if o["kind"] == "HelmRelease"]
    deps = {o["metadata"]["name"]: o["spec"].get("dependsOn", []) for o in flux}
    assert deps["gpu-queueing-team-queues"] == [{"name": "gpu-queueing-kueue"}]
    assert deps["gpu-queueing-kueue"] == []
    hf = yaml.safe_load(gitops.generate(cat, rb, "helmfile", REGISTRY)["helmfile.yaml"])
    needs = {r["name"]: r.get("needs", []) for r in hf["releases"]}
    assert needs["team-queues"] == ["kueue-system/kueue"]
    for o in argo + flux:
        assert o["metadata"]["annotations"]["gpu-catalog.dev/bundle-digest"] == rb.digest


@pytest.mark.parametrize("fmt", ["argocd", "flux"])
def test_objects_match_the_pinned_crds(fmt: str, cat: model.Catalog, rb: render.RenderedBundle) -> None:
    objs = gitops.objects(gitops.generate(cat, rb, fmt, REGISTRY))
    assert gitops_crds.check(fmt, objs, rb.kube_version) == []
    objs[0]["spec"]["notAField"] = True
    assert [f.field for f in gitops_crds.check(fmt, objs, rb.kube_version)] == ["spec.notAField"]


def test_local_chart_needs_a_registry(cat: model.Catalog, rb: render.RenderedBundle) -> None:
    with pytest.raises(errors.InputError, match="in this repository only") as exc:
        gitops.generate(cat, rb, "flux", None)
    assert exc.value.exit_code == 2


def test_cli_writes_lock_and_keeps_foreign_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "apps"
    argv = ["render", REF, "--profile", "sim", "--format", "flux", "--registry", REGISTRY, "--out", str(out)]
    assert main(argv) == 0
    lock = json.loads((out / render.LOCK_FILE).read_text())
    marker = json.loads((out / render.MARKER).read_text())
    assert marker["format"] == "flux" and marker["digest"] == lock["digest"]
    assert main(argv) == 0  # its own previous output is replaced
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    assert main([*argv[:-1], str(foreign)]) == 2
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]
    assert main(["render", REF, "--profile", "sim", "--format", "argocd", "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()
    capsys.readouterr()


@pytest.fixture(scope="module")
def gitops_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A bare API server with the pinned Argo CD and Flux CRDs installed and their namespaces."""
    with api_server(tmp_path_factory.mktemp("gitops-api")) as kc:
        kubectl = build.ensure("kubectl")
        crds = gitops_crds.crd_objects("argocd") + gitops_crds.crd_objects("flux")
        executor.run([kubectl, "--kubeconfig", kc, "apply", "--server-side", "-f", "-"],
                     input=render.dump_objects(crds))
        deadline = time.monotonic() + 90
        while True:  # kubectl wait gives up on a CRD with no conditions yet; ask again until then
            done = executor.run([kubectl, "--kubeconfig", kc, "wait", "--for=condition=Established", "crd", "--all",
                                 "--timeout=60s"], check=False)
            if done.returncode == 0:
                break
            assert "accessor error" in done.stderr and time.monotonic() < deadline, done.stderr
        for ns in (gitops.ARGOCD_NAMESPACE, gitops.FLUX_NAMESPACE):
            executor.run([kubectl, "--kubeconfig", kc, "create", "namespace", ns])
        yield kc


@pytest.mark.parametrize("fmt", ["argocd", "flux"])
def test_server_side_dry_run_accepts_the_objects(
    fmt: str, gitops_api: Path, cat: model.Catalog, rb: render.RenderedBundle
) -> None:
    objs = gitops.objects(gitops.generate(cat, rb, fmt, REGISTRY))
    started = time.monotonic()
    proc = executor.run([build.ensure("kubectl"), "--kubeconfig", gitops_api, "apply", "--server-side",
                         "--dry-run=server", "--validate=strict", "-f", "-"], input=render.dump_objects(objs))
    print(f"{fmt}: server-side dry run of {len(objs)} objects in {time.monotonic() - started:.2f}s")
    assert proc.stdout.count("(server dry run)") == len(objs), proc.stdout
