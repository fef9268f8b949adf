"""Drift checks of the kueue component against the pinned Go module it is built from: the CRD
digest still matches, and what the chart restates by name (conversion CRDs, webhook paths, RBAC
rules) still exists upstream, so a version bump that changes any of them fails here, not live."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.catalog import loader, modulecrds, render
from gpucatalog.toolchain import build

pytestmark = pytest.mark.toolchain  # go mod download, helm

REPO = Path(__file__).resolve().parents[2]
CAT = loader.load_catalog(REPO / "catalog")
CV = CAT.versions[("kueue", "v0.17.0")]


@pytest.fixture(scope="module")
def module() -> Path:
    assert CV.crds is not None
    return build.module_dir(CV.crds.module, CV.crds.version)


@pytest.fixture(scope="module")
def rendered() -> render.RenderedBundle:
    return render.render_bundle(CAT, "gpu-queueing@0.1.0", "sim")


def _objs(rb: render.RenderedBundle, component: str) -> list[dict[str, Any]]:
    return next(c.objects for c in rb.components if c.name == component)


def _triples(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_pinned_crd_digest_matches_the_module() -> None:
    assert CV.crds is not None and CV.crds.module == "sigs.k8s.io/kueue"
    assert CV.crds.version == CV.version == build.load_manifest()["kueue"].version
    files = modulecrds.module_files(CV.crds, CV.source_file)  # raises on a digest mismatch
    assert "kueue.x-k8s.io_clusterqueues.yaml" in files and len(files) == 11


def test_conversion_webhooks_are_the_crds_kueue_injects_a_ca_into(module: Path, rendered: render.RenderedBundle) -> None:
    cert_go = (module / "pkg/util/cert/cert.go").read_text()
    upstream = set(re.findall(r"cert\.CRDConversion,\s*Name:\s*\"([^\"]+)\"", cert_go))
    crds = [o for o in _objs(rendered, "kueue") if o["kind"] == "CustomResourceDefinition"]
    converted = {c["metadata"]["name"] for c in crds if (c["spec"].get("conversion") or {}).get("strategy") == "Webhook"}
    assert upstream and converted == upstream


def test_webhook_paths_are_ones_kueue_registers(module: Path, rendered: render.RenderedBundle) -> None:
    markers = set()
    for go in (module / "pkg").rglob("*.go"):
        text = go.read_text(errors="replace")
        if "+kubebuilder:webhook:" in text:
            markers.update(re.findall(r"\+kubebuilder:webhook:[^\n]*?path=([^,\s]+)", text))
    objs = _objs(rendered, "kueue")
    paths = {w["clientConfig"]["service"]["path"] for o in objs if o["kind"].endswith("WebhookConfiguration")
             for w in o["webhooks"]}
    assert paths and paths <= markers, paths - markers


def test_rbac_is_a_subset_of_what_kueue_declares(module: Path, rendered: render.RenderedBundle) -> None:
    rbac = module / "config/components/rbac"
    declared = _triples(yaml.safe_load((rbac / "role.yaml").read_text())["rules"])
    declared |= _triples(yaml.safe_load((rbac / "metrics_auth_role.yaml").read_text())["rules"])
    ns_declared = set()
    for name in ("leader_election_role.yaml", "manager_secrets_role.yaml"):
        ns_declared |= _triples(yaml.safe_load((rbac / name).read_text())["rules"])
    objs = _objs(rendered, "kueue")
    role = next(o for o in objs if o["kind"] == "ClusterRole")
    ns_role = next(o for o in objs if o["kind"] == "Role")
    assert _triples(role["rules"]) - declared == set()
    assert _triples(ns_role["rules"]) - ns_declared == set()
    assert len(_triples(role["rules"])) < len(declared) / 2  # far less than the all-integrations role


def test_team_queue_kinds_are_served_by_the_pinned_crds(rendered: render.RenderedBundle) -> None:
    served = {}
    for crd in (o for o in _objs(rendered, "kueue") if o["kind"] == "CustomResourceDefinition"):
        for v in crd["spec"]["versions"]:
            if v["served"]:
                served[(f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"])] = v["storage"]
    kinds = {(o["apiVersion"], o["kind"]) for o in _objs(rendered, "team-queues") if o["apiVersion"].startswith("kueue")}
    assert kinds == {("kueue.x-k8s.io/v1beta2", k) for k in ("ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue")}
    assert all(served.get(k) is True for k in kinds)  # the storage version: no conversion on the way in
