"""Shared fixtures for chart tests: the pinned helm binary and a `helm template` runner."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucatalog.catalog import errors, executor
from gpucatalog.toolchain import build

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "charts"
KUBE_VERSION = "1.36.3"

Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def helm() -> str:
    return str(build.ensure("helm"))


def _template(helm: str, chart: str, values: dict[str, Any] | None, extra: list[str]) -> str:
    argv = [helm, "template", "rel", str(CHARTS / chart), "--namespace", "kai-scheduler",
            "--kube-version", KUBE_VERSION, *extra]
    stdin = None
    if values is not None:
        argv += ["--values", "-"]
        stdin = yaml.safe_dump(values)
    return executor.run(argv, input=stdin).stdout


@pytest.fixture()
def render(helm: str) -> Render:
    """Render a chart with real helm; return its documents (None documents dropped)."""

    def _render(chart: str, values: dict[str, Any] | None = None, *extra: str) -> list[dict[str, Any]]:
        out = _template(helm, chart, values, list(extra))
        return [d for d in yaml.safe_load_all(out) if d]

    return _render


@pytest.fixture()
def render_error(helm: str) -> Callable[..., str]:
    """Render a chart that must fail; return helm's error text."""

    def _render_error(chart: str, values: dict[str, Any] | None = None, *extra: str) -> str:
        with pytest.raises(errors.ToolError) as info:
            _template(helm, chart, values, list(extra))
        return info.value.stderr

    return _render_error
