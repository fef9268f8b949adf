"""``fault_remediation``'s observation windows are passes of gpu-health's own cycle, as the bundle
installed it: a 0.5 s sim controller gets short windows, a real cluster's defaults long ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.remediation import env as remediation_env


def _env(params: dict[str, Any]) -> remediation_env.Env:
    env = object.__new__(remediation_env.Env)  # no API server: only the window arithmetic
    env.ctx = base.SuiteContext(kubeconfig=Path("unused"), params=params)
    return env


def test_windows_follow_the_installed_intervals() -> None:
    env = _env({"bundle_values": {"gpu-health": {"agent": {"intervalSeconds": 0.5},
                                                  "controller": {"intervalSeconds": 0.5}}}})
    assert env.cycle("agent") == env.cycle("controller") == 0.5
    assert env.passes(6) == 3.0
    assert env.passes(1) == 1.0  # never under one API round trip


@pytest.mark.parametrize("values", [{}, {"gpu-health": {"agent": {"intervalSeconds": "fast"}}},
                                    {"gpu-health": {"controller": {"intervalSeconds": -1}}}])
def test_missing_or_unusable_intervals_fall_back_to_the_chart_defaults(values: dict[str, Any]) -> None:
    env = _env({"bundle_values": values})
    assert (env.cycle("agent"), env.cycle("controller")) == (10.0, 2.0)
    assert env.passes(4) == 8.0


def test_fallbacks_are_the_charts_own_defaults() -> None:
    import yaml

    chart = yaml.safe_load((Path(__file__).parents[4] / "charts" / "gpu-health" / "values.yaml").read_text())
    assert remediation_env.CHART_INTERVALS == {part: float(chart[part]["intervalSeconds"])
                                               for part in ("agent", "controller")}


@pytest.mark.parametrize(("controller", "seconds"), [
    ({"repairTimeoutSeconds": 120, "verifyTimeoutSeconds": 120, "intervalSeconds": 0.25}, 242.5),
    ({"repairTimeoutSeconds": 30, "verifyTimeoutSeconds": 30, "intervalSeconds": 0.25}, 120.0),  # never under 120 s
    ({}, 1820.0),  # the chart's 20 + 10 minutes and ten 2 s passes
])
def test_back_in_service_waits_as_long_as_the_controller_may_take(controller: dict[str, Any], seconds: float) -> None:
    assert _env({"bundle_values": {"gpu-health": {"controller": controller}}}).back_in_service_s() == seconds


def test_timeout_fallbacks_are_the_charts_own_defaults() -> None:
    import yaml

    chart = yaml.safe_load((Path(__file__).parents[4] / "charts" / "gpu-health" / "values.yaml").read_text())
    assert remediation_env.CHART_TIMEOUTS == {k: float(chart["controller"][k]) for k in remediation_env.CHART_TIMEOUTS}
