"""Root conftest: one sim cluster per test run, shared by every integration test, and a writable
copy of the shipped catalog for tests that seed bad input into it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["gpucatalog.validators.clusters.sim.pytest_plugin"]

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """``catalog/`` and ``charts/`` copied into a temp folder; returns the copied ``catalog/``."""
    shutil.copytree(REPO / "catalog", tmp_path / "catalog")
    shutil.copytree(REPO / "charts", tmp_path / "charts")
    return tmp_path / "catalog"
