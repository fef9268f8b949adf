"""The CRDs of the GitOps tools whose objects ``catalog render --format`` writes, and the schema
check of those objects against them.

Called by ``catalog render --format`` / ``install --gitops`` before anything is written, and by
the tests that apply the objects to a real API server. The CRDs are read like Kueue's
(``catalog.modulecrds``): from each tool's Go module at a pinned version, refused unless their
bytes match the pinned digest. Flux's helm-controller module is not served by the module proxy,
so its HelmRelease CRD is vendored under ``data/`` (with its licence) and pinned the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpucatalog.catalog import model, modulecrds
from gpucatalog.core import errors
from gpucatalog.validators.static import crds, objects, openapi, schema_check, target, types

DATA = Path(__file__).parent / "data"

# Each pin: where the CRD files live and the digest of every *.yaml file in that folder.
ARGOCD = model.ModuleCRDs(
    module="github.com/argoproj/argo-cd/v3", version="v3.5.8", path="manifests/crds", into="",
    digest="sha256:22d9ff126bb6b7702aff01f130d50f31e090b706c78e58f78bebaaf57b657a64")
FLUX_SOURCE = model.ModuleCRDs(
    module="github.com/fluxcd/source-controller", version="v1.9.6", path="config/crd/bases", into="",
    digest="sha256:86c13439b3a41a3ea4d2a39a573284acd9abb3b0c58f5f88f16991016ac51a68")
FLUX_HELM = DATA / "helm-controller-v1.6.3"
FLUX_HELM_DIGEST = "sha256:cbbb052bb9d6d2d8ba9f8701ccc260101023f43ce23d1b517aa91688e0e43828"


def _vendored(folder: Path, digest: str) -> dict[str, bytes]:
    files = modulecrds.read_folder(folder)
    actual = modulecrds.files_digest(files)
    if actual != digest:
        raise errors.InputError(f"vendored CRDs in {folder} have digest {actual}, pinned {digest}",
                                path=str(folder), expected=digest)
    return files


def crd_objects(fmt: str) -> list[dict[str, Any]]:
    """The pinned CRDs the ``fmt`` form's objects are instances of (none for helm and helmfile)."""
    if fmt == "argocd":
        files = modulecrds.module_files(ARGOCD)
    elif fmt == "flux":
        files = {**modulecrds.module_files(FLUX_SOURCE), **_vendored(FLUX_HELM, FLUX_HELM_DIGEST)}
    else:
        return []
    docs = [d for data in files.values() for d in yaml.safe_load_all(data)]
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "CustomResourceDefinition"]


def check(fmt: str, objs: list[dict[str, Any]], kube_version: str) -> list[errors.Finding]:
    """Schema findings of ``objs`` against the pinned CRDs (and built-in kinds), one per problem."""
    checker = schema_check.SchemaChecker(openapi.load(kube_version), crds.collect(crd_objects(fmt)), frozenset())
    comp = types.ComponentObjects(name=fmt, namespace="", objects=objs)
    findings: list[errors.Finding] = []
    for obj in objs:
        meta = objects.mapping(obj, "metadata")
        ident = objects.Identity(str(obj.get("apiVersion", "")), str(obj.get("kind", "")),
                                 str(meta.get("name", "")), str(meta.get("namespace", "")))
        findings += checker.check(target.Target(comp, ident, objects.strip_nulls(obj)))
    return findings
