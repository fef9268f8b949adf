"""Chart tests: a renderer for charts that must fail (``render_chart`` and ``helm`` come from the
root conftest)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.core import errors
from tests.conftest import helm_template


@pytest.fixture()
def render_error(helm: Path) -> Callable[..., str]:
    """Render a chart that must fail; return helm's error text."""

    def _render_error(chart: str, values: dict[str, Any] | None = None, *extra: str) -> str:
        with pytest.raises(errors.ToolError) as info:
            helm_template(helm, chart, values, *extra)
        return info.value.stderr

    return _render_error
