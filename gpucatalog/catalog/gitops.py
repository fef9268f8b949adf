"""The GitOps forms of a rendered bundle: Argo CD Applications, Flux HelmReleases, a helmfile.

Called by ``catalog render --format`` and ``catalog install --gitops``. From one certified render
(:class:`render.RenderedBundle`) each component becomes one object that names its chart (name,
version; the lock's chart digest as an annotation) and carries the exact merged values the render
used, ordered by ``dependsOn`` (Argo CD sync waves, Flux ``spec.dependsOn``, helmfile ``needs``).

Where the chart comes from, honestly: a chart of this repository exists nowhere else, so it must
be published first (``catalog publish --registry oci://HOST/PATH`` pushes it as
``HOST/PATH/<chart>:<version>``) and ``registry`` names that place; with ``registry`` every chart
is taken from there. Without it a remote chart keeps its pinned upstream source and a local chart
is refused (exit 2). A Kueue-style chart assembled with CRDs from a Go module is published
assembled, so the registry copy renders the same objects; a Git path to ``charts/`` would not.

A profile's kustomize overlay is carried by Flux (``postRenderers``); Argo CD and helmfile have no
equivalent for a Helm source here, so a bundle with an overlay is refused for them (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpucatalog.catalog import model, render
from gpucatalog.core import errors

FORMATS = ("helm", "argocd", "flux", "helmfile")
HELM_CHART_MEDIA = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
ARGOCD_NAMESPACE = "argocd"
FLUX_NAMESPACE = "flux-system"
ANNOTATION = "gpu-catalog.dev/"


@dataclass(frozen=True)
class Chart:
    """Where a GitOps tool fetches one component's chart."""

    repository: str  # oci://HOST/PATH (no chart name) or an https Helm repository
    name: str
    version: str
    digest: str  # the lock's chart digest: tree digest of a local chart, archive sha256 of a remote one

    @property
    def oci(self) -> bool:
        return self.repository.startswith("oci://")

    @property
    def url(self) -> str:
        return f"{self.repository}/{self.name}"


def _chart_name(chart_dir: str, src: model.ChartSource) -> str:
    if src.url is not None:  # named as the chart cache names it (charts.resolve)
        return src.url.rstrip("/").rsplit("/", 1)[-1]
    meta = yaml.safe_load((Path(chart_dir) / "Chart.yaml").read_text())
    return str(meta["name"]) if isinstance(meta, dict) and meta.get("name") else Path(chart_dir).name


def charts(cat: model.Catalog, rb: render.RenderedBundle, registry: str | None) -> dict[str, Chart]:
    """component name -> its chart's GitOps source; InputError when a local chart has none."""
    if registry is not None and not registry.startswith("oci://"):
        raise errors.InputError(f"registry {registry!r} is not an oci:// reference", field="--registry",
                                expected="oci://HOST/PATH, where `catalog publish` pushed the charts")
    out: dict[str, Chart] = {}
    for c in rb.components:
        lock = rb.lock_component(c.name)["chart"]
        src = cat.versions[(c.name, c.version)].chart
        name = _chart_name(c.chart_dir, src)
        if registry is not None:
            repo = registry.rstrip("/")
        elif src.url is not None:
            repo = src.url.rstrip("/").rsplit("/", 1)[0]
        else:
            raise errors.InputError(
                f"component {c.name}'s chart ({src.path}) is in this repository only; publish the bundle "
                "(`catalog publish`) and name that registry", field="--registry",
                expected="oci://HOST/PATH where the bundle's charts are published")
        out[c.name] = Chart(repo, name, str(lock["version"]), str(lock["digest"]))
    return out


def waves(rb: render.RenderedBundle) -> dict[str, int]:
    """component -> sync wave: 0 without dependencies, else one more than its latest dependency."""
    deps = _depends_on(rb)
    out: dict[str, int] = {}
    for c in rb.components:  # the render's install order: every dependency comes first
        out[c.name] = 1 + max((out[d] for d in deps[c.name]), default=-1)
    return out


def _depends_on(rb: render.RenderedBundle) -> dict[str, tuple[str, ...]]:
    return {c.name: c.depends_on for c in rb.components}


def _overlays(rb: render.RenderedBundle, cat: model.Catalog) -> dict[str, dict[str, Any]]:
    return dict(cat.bundles[(rb.bundle, rb.version)].profiles[rb.profile].kustomize)


def _annotations(rb: render.RenderedBundle, name: str, chart: Chart) -> dict[str, str]:
    lock = rb.lock_component(name)
    return {
        ANNOTATION + "bundle": rb.ref,
        ANNOTATION + "profile": rb.profile,
        ANNOTATION + "bundle-digest": rb.digest,
        ANNOTATION + "chart-digest": chart.digest,
        ANNOTATION + "values-digest": str(lock["values"]["digest"]),
    }


def _dump(objs: list[dict[str, Any]]) -> str:
    return "".join("---\n" + yaml.safe_dump(o, sort_keys=False, default_flow_style=False) for o in objs)


def _kustomization(files: list[str]) -> str:
    # A plain kustomize file, so one parent (an app of apps, a Flux Kustomization) can take the folder.
    return yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                           "resources": files}, sort_keys=False)


def _refuse_overlays(rb: render.RenderedBundle, cat: model.Catalog, fmt: str) -> None:
    with_overlay = sorted(n for n, o in _overlays(rb, cat).items() if o.get("patches"))
    if with_overlay:
        raise errors.InputError(
            f"profile {rb.profile} of {rb.ref} patches {', '.join(with_overlay)} with a kustomize overlay, "
            f"which the {fmt} form cannot carry for a Helm chart", field=f"spec.profiles.{rb.profile}.kustomize",
            path=str(cat.bundles[(rb.bundle, rb.version)].source_file), expected="--format flux or helm")


def argocd(cat: model.Catalog, rb: render.RenderedBundle, registry: str | None) -> dict[str, str]:
    """One Application per component (namespace ``argocd``, project ``default``), sync wave by
    dependency depth, plus a kustomization.yaml listing them for an app of apps."""
    _refuse_overlays(rb, cat, "argocd")
    srcs, wave = charts(cat, rb, registry), waves(rb)
    files: dict[str, str] = {}
    for c in rb.components:
        chart = srcs[c.name]
        app = {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {
                "name": f"{rb.bundle}-{c.name}",
                "namespace": ARGOCD_NAMESPACE,
                "annotations": {"argocd.argoproj.io/sync-wave": str(wave[c.name]),
                                **_annotations(rb, c.name, chart)},
            },
            "spec": {
                "project": "default",
                "source": {
                    # Argo CD names an OCI Helm repository without its scheme (and a repository
                    # secret with enableOCI); an https repository keeps it.
                    "repoURL": chart.repository.removeprefix("oci://"),
                    "chart": chart.name,
                    "targetRevision": chart.version,
                    "helm": {"releaseName": c.release, "kubeVersion": rb.kube_version, "valuesObject": c.values},
                },
                "destination": {"server": "https://kubernetes.default.svc", "namespace": c.namespace},
                "syncPolicy": {"syncOptions": ["CreateNamespace=true", "ServerSideApply=true"]},
            },
        }
        files[f"{wave[c.name]:02d}-{c.name}.yaml"] = _dump([app])
    files["kustomization.yaml"] = _kustomization(sorted(files))
    return files


def flux(cat: model.Catalog, rb: render.RenderedBundle, registry: str | None) -> dict[str, str]:
    """Per component a source (OCIRepository for an OCI chart, HelmRepository otherwise) and a
    HelmRelease in ``flux-system`` aimed at the component's namespace, ``dependsOn`` as the bundle's."""
    srcs, deps, overlays = charts(cat, rb, registry), _depends_on(rb), _overlays(rb, cat)
    files: dict[str, str] = {}
    for c in rb.components:
        chart = srcs[c.name]
        name = f"{rb.bundle}-{c.name}"
        meta = {"name": name, "namespace": FLUX_NAMESPACE, "annotations": _annotations(rb, c.name, chart)}
        spec: dict[str, Any] = {
            "interval": "10m",
            "releaseName": c.release,
            "targetNamespace": c.namespace,
            "storageNamespace": c.namespace,  # where `catalog install` keeps the release too
            "install": {"createNamespace": True, "crds": "CreateReplace"},
            "upgrade": {"crds": "CreateReplace"},
            "values": c.values,
        }
        if chart.oci:
            source = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository", "metadata": meta,
                      "spec": {"interval": "10m", "url": chart.url, "ref": {"tag": chart.version},
                               "layerSelector": {"mediaType": HELM_CHART_MEDIA, "operation": "copy"}}}
            spec["chartRef"] = {"kind": "OCIRepository", "name": name}
        else:
            source = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository", "metadata": meta,
                      "spec": {"interval": "10m", "url": chart.repository}}
            spec["chart"] = {"spec": {"chart": chart.name, "version": chart.version,
                                      "sourceRef": {"kind": "HelmRepository", "name": name}}}
        if deps[c.name]:
            spec["dependsOn"] = [{"name": f"{rb.bundle}-{d}"} for d in deps[c.name]]
        patches = overlays.get(c.name, {}).get("patches")
        if patches:
            spec["postRenderers"] = [{"kustomize": {"patches": patches}}]
        release = {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "metadata": meta, "spec": spec}
        files[f"{c.name}.yaml"] = _dump([source, release])
    files["kustomization.yaml"] = _kustomization(sorted(files))
    return files


def helmfile(cat: model.Catalog, rb: render.RenderedBundle, registry: str | None) -> dict[str, str]:
    """One helmfile.yaml: a repository per chart source, a release per component, ``needs`` as
    the bundle's ``dependsOn``."""
    _refuse_overlays(rb, cat, "helmfile")
    srcs, deps = charts(cat, rb, registry), _depends_on(rb)
    by_name = {c.name: c for c in rb.components}
    repos: dict[str, dict[str, Any]] = {}
    releases = []
    for c in rb.components:
        chart = srcs[c.name]
        repo_name = "catalog" if chart.oci and chart.repository == (registry or "").rstrip("/") else f"{c.name}-charts"
        repo: dict[str, Any] = {"name": repo_name, "url": chart.repository.removeprefix("oci://")}
        if chart.oci:
            repo["oci"] = True
        repos.setdefault(repo_name, repo)
        rel: dict[str, Any] = {"name": c.release, "namespace": c.namespace, "chart": f"{repo_name}/{chart.name}",
                               "version": chart.version, "createNamespace": True,
                               "labels": {"bundle": rb.bundle, "component": c.name}, "values": [c.values]}
        if deps[c.name]:
            rel["needs"] = [f"{by_name[d].namespace}/{by_name[d].release}" for d in deps[c.name]]
        releases.append(rel)
    doc = {"repositories": list(repos.values()), "releases": releases}
    header = f"# {rb.ref} ({rb.profile}), digest {rb.digest}: written by `catalog render --format helmfile`\n"
    return {"helmfile.yaml": header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)}


GENERATORS = {"argocd": argocd, "flux": flux, "helmfile": helmfile}


def generate(cat: model.Catalog, rb: render.RenderedBundle, fmt: str, registry: str | None) -> dict[str, str]:
    """relative path -> text of the ``fmt`` form of ``rb`` (``helm``: the render's own folders)."""
    if fmt == "helm":
        return {f"{c.name}/{render.MANIFESTS}": c.manifest_text for c in rb.components}
    if fmt not in GENERATORS:
        raise errors.InputError(f"unknown format {fmt!r}", field="--format", expected=", ".join(FORMATS))
    return GENERATORS[fmt](cat, rb, registry)


def objects(files: dict[str, str]) -> list[dict[str, Any]]:
    """The Kubernetes objects among generated files (not kustomization.yaml or helmfile.yaml)."""
    out: list[dict[str, Any]] = []
    for rel, text in sorted(files.items()):
        if rel in ("kustomization.yaml", "helmfile.yaml"):
            continue
        out += [o for o in yaml.safe_load_all(text) if isinstance(o, dict)]
    return out
