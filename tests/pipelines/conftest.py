"""Fixtures for the pipelines tests: real keys, real signed evidence from real suite runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.pipelines import evidence, keys, sample, trust
from gpucatalog.validators.conformance import base

DIGEST_A = "sha256:" + "a1" * 32
DIGEST_B = "sha256:" + "b2" * 32


@pytest.fixture(scope="session")
def suites() -> list[base.SuiteResult]:
    return sample.run()


@pytest.fixture(scope="session")
def passing_suites(suites: list[base.SuiteResult]) -> list[base.SuiteResult]:
    return [s for s in suites if s.result == "passed"]


@pytest.fixture
def ci_key(tmp_path: Path) -> keys.GeneratedKey:
    return keys.generate(tmp_path / "keys", "ci")


@pytest.fixture
def rogue_key(tmp_path: Path) -> keys.GeneratedKey:
    return keys.generate(tmp_path / "keys", "rogue")


@pytest.fixture
def catalog_dir(tmp_path: Path, ci_key: keys.GeneratedKey) -> Path:
    """A catalog folder with a candidate -> stable policy and a trust file trusting ``ci``."""
    root = tmp_path / "catalog"
    (root / "channels").mkdir(parents=True)
    (root / "channels" / "policy.yaml").write_text(yaml.safe_dump({
        "apiVersion": "gpu-catalog.dev/v1alpha1",
        "kind": "PromotionPolicy",
        "channels": {
            "candidate": {"requiredProfiles": ["sim"], "requiredSuites": {"*": ["fractional_gpu"]},
                          "requireBundleSuites": True},
            "stable": {"sourceChannel": "candidate", "requiredProfiles": ["sim"],
                       "requiredSuites": {"*": ["fractional_gpu"]}, "requireBundleSuites": True},
        },
    }))
    trust.add_key(root / "trust.yaml", "ci", keys.load_public(ci_key.public_path), ["candidate", "stable"])
    return root


MakeEvidence = Callable[..., Path]


@pytest.fixture
def make_evidence(tmp_path: Path, ci_key: keys.GeneratedKey, passing_suites: list[base.SuiteResult]) -> MakeEvidence:
    counter = iter(range(1000))

    def make(bundle: str = "gpu-scheduling", version: str = "0.1.0", profile: str = "sim",
             digest: str = DIGEST_A, suites: list[Any] | None = None, key: Path | None = None) -> Path:
        out = tmp_path / f"evidence-{next(counter)}"
        evidence.write_evidence(
            out, bundle=bundle, version=version, profile=profile, digest=digest, cluster=sample.CLUSTER,
            tools={"helm": "v4.3.2"}, suites=passing_suites if suites is None else suites,
            started=time.time() - 5, finished=time.time(), signing_key_path=key or ci_key.private_path,
        )
        return out

    return make
