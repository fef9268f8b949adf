"""The catalog's data model: frozen dataclasses loaded from versioned YAML documents.

Loaded by ``catalog.loader``; consumed by ``catalog.resolve`` and ``catalog.render``. Raw
Kubernetes objects stay plain dicts; only catalog documents become classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucatalog.catalog import versions as semver

API_VERSION = "gpu-catalog.dev/v1alpha1"


@dataclass(frozen=True)
class ChartSource:
    """Where a component's chart comes from.

    Either ``path`` (a chart in this repo's ``charts/``) or ``url`` (``oci://`` or ``https://``)
    pinned by ``version`` *and* ``digest`` (sha256 of the chart archive), resolved offline from
    the chart cache/mirror.
    """

    path: str | None = None
    url: str | None = None
    version: str | None = None
    digest: str | None = None

    @property
    def is_local(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class ModuleCRDs:
    """CRDs a local chart takes from a pinned Go module at render time instead of carrying copies.

    ``path`` is the folder inside ``module@version`` holding one CRD per ``*.yaml`` file; ``into``
    is the folder inside the chart they are placed in (the chart's templates read them there);
    ``digest`` pins their bytes (see ``catalog.modulecrds``), so a different module content is
    refused rather than rendered.
    """

    module: str
    version: str
    path: str
    into: str
    digest: str


@dataclass(frozen=True)
class Image:
    name: str
    ref: str
    digest: str | None = None


@dataclass(frozen=True)
class Declarations:
    """What a component declares about itself for the policy checks, with reasons."""

    privileged: dict[str, str] = field(default_factory=dict)  # "Kind/name" -> why
    rbac_wildcards: dict[str, str] = field(default_factory=dict)  # "Kind/name" -> why
    pod_security: str = "baseline"  # PodSecurity level of the component's namespace
    # Certification scans the logs of the component's pods (its release namespace, plus
    # ``log_namespaces``): a line matching one of these regexes fails the run. regex -> why.
    log_patterns: dict[str, str] = field(default_factory=dict)
    log_namespaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class Component:
    name: str
    description: str
    source_file: Path


@dataclass(frozen=True)
class ComponentVersion:
    component: str
    version: str
    chart: ChartSource
    images: tuple[Image, ...]
    kubernetes: str  # supported range, e.g. ">=1.30.0 <1.37.0"
    values: dict[str, Any]
    declarations: Declarations
    source_file: Path
    crds: ModuleCRDs | None = None

    @property
    def ref(self) -> str:
        return f"{self.component}@{self.version}"


@dataclass(frozen=True)
class BundleComponent:
    """One component of a bundle, in the bundle's install order."""

    name: str
    version: str
    release: str
    namespace: str
    values: dict[str, Any]
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class Profile:
    """A target cluster shape: value overlays and optional kustomize patches per component."""

    name: str
    description: str
    values: dict[str, dict[str, Any]]
    kustomize: dict[str, dict[str, Any]]
    cluster: dict[str, Any]
    # conformance suite name -> extra SuiteContext params on this target (timeouts, fault kind)
    suite_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the suites certification on this target runs instead of the bundle's (e.g. a large
    # cluster's ``scale`` suite); empty: the bundle's
    suites: tuple[str, ...] = ()


@dataclass(frozen=True)
class Bundle:
    name: str
    version: str
    description: str
    kube_version: str
    components: tuple[BundleComponent, ...]
    profiles: dict[str, Profile]
    suites: tuple[str, ...]
    source_file: Path
    # image repositories whose program the user brings (an image-map overlay may map only these)
    user_supplied_images: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Catalog:
    root: Path  # the catalog data folder
    repo_root: Path  # where local chart paths are resolved
    components: dict[str, Component]
    versions: dict[tuple[str, str], ComponentVersion]
    bundles: dict[tuple[str, str], Bundle]

    def bundle_versions(self, name: str) -> list[str]:
        return semver.sort_versions([v for (n, v) in self.bundles if n == name])
