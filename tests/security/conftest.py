"""Hostile-input tests: every attack of issue 14 kept as a regression test. They share the small
self-contained catalog of the catalog tests (one demo chart, two components, one bundle)."""

import pytest
import yaml

from gpucatalog.catalog import loader, render
from gpucatalog.pipelines import keys, promote, trust
from tests.catalog.conftest import mini_catalog

__all__ = ["mini_catalog"]


@pytest.fixture
def certified_mini(mini_catalog, ci_key, make_evidence):  # type: ignore[no-untyped-def]
    """The mini catalog with a candidate -> stable policy, a trust file trusting ``ci``, and
    mini@0.1.0 promoted to both channels for profile sim with evidence of its real render."""
    (mini_catalog / "channels").mkdir()
    (mini_catalog / "channels" / "policy.yaml").write_text(yaml.safe_dump({
        "apiVersion": "gpu-catalog.dev/v1alpha1", "kind": "PromotionPolicy",
        "channels": {"candidate": {"requiredProfiles": ["sim"]},
                     "stable": {"sourceChannel": "candidate", "requiredProfiles": ["sim"]}}}))
    trust.add_key(mini_catalog / "trust.yaml", "ci", keys.load_public(ci_key.public_path), ["candidate", "stable"])
    digest = render.render_bundle(loader.load_catalog(mini_catalog), "mini@0.1.0", "sim").digest
    ev = make_evidence(bundle="mini", version="0.1.0", profile="sim", digest=digest)
    for ch in ("candidate", "stable"):
        promote.promote("mini", "0.1.0", ch, [ev], lambda _p: digest, catalog_dir=mini_catalog, promoted_by="ci")
    return mini_catalog
