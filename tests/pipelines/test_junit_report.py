from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.pipelines import evidence, junit, report, sample, screenshot
from gpucatalog.validators.conformance.kit import base


def _statement(suites: list[Any]) -> dict[str, Any]:
    return evidence.build_statement(bundle="gpu-scheduling", version="0.1.0", profile="sim",
                                    digest="sha256:" + "a1" * 32, cluster=sample.CLUSTER, tools={"helm": "v4.3.2"},
                                    suites=suites, started=0.0, finished=60.0)


def test_junit_counts_and_failure_reasons(suites: list[base.SuiteResult]) -> None:
    root = ET.fromstring(junit.render(_statement(suites)["predicate"]))
    assert root.get("tests") == str(sum(len(s.cases) for s in suites))
    assert root.get("failures") == "1"
    gang = next(ts for ts in root.iter("testsuite") if ts.get("name") == "gang")
    failure = gang.find("testcase[@name='reclaim-over-quota']/failure")
    assert failure is not None and "not reclaimed" in (failure.get("message") or "")
    case = gang.find("testcase[@name='all-or-nothing-6-pods']")
    assert case is not None and float(case.get("time", "0")) > 0


def test_junit_suite_without_cases_is_a_failure() -> None:
    root = ET.fromstring(junit.render(_statement([{"name": "empty", "cases": []}])["predicate"]))
    assert root.get("failures") == "1"


def test_report_is_self_contained_and_draws_every_picture(suites: list[base.SuiteResult]) -> None:
    html = report.render(_statement(suites))
    # Nothing loaded from outside the file: no external src/href, no @import, no url().
    assert not re.search(r"""(src|href)\s*=\s*["'](https?:|//)""", html)
    assert "@import" not in html and "url(" not in html
    assert html.count("<svg") == 3 + 2 + 1  # 3 suite timelines, 2 allocation pictures, 1 remediation
    assert "GPU allocation per node" in html and "Remediation state timeline" in html
    assert "frac-a: 0.5 of GPU 0 on sim-h100-0" in html
    assert "FaultDetected at +1.00s" in html
    assert "team-b pod still Pending" in html  # failure reason in the summary


def test_a_fill_is_drawn_as_one_line_per_team() -> None:
    case = base.CaseResult("fill_single_gpu_jobs", "passed", details={
        "series": {"t0": [[0.0, 0], [5.0, 3], [10.0, 8]], "t1": [[0.0, 0], [5.0, 1], [10.0, 8]]}})
    html = report.render(_statement([base.SuiteResult("scale", [case], 10.0)]))
    assert "Units running over time" in html and "scale/fill_single_gpu_jobs" in html
    assert html.count("<polyline") == 2 and "t0: 8 at the end" in html and "8 running" in html
    assert "Floor" not in html  # none measured
    case.details.update({"floor": {"pods": 16, "seconds": 2.04}, "over_floor_s": 7.96})
    html = report.render(_statement([base.SuiteResult("scale", [case], 10.0)]))
    assert "Floor: 16 pods placed in 2.0 s with no scheduler" in html and "the stack took 8.0 s above it" in html


def test_report_escapes_untrusted_text() -> None:
    evil = {"name": "s", "cases": [{"name": "<script>alert(1)</script>", "result": "failed", "reason": "<b>x</b>",
                                    "details": {"placements": [{"pod": "<img>", "node": "n", "gpu": 0}]}}]}
    html = report.render(_statement([evil]))
    assert "<script>alert" not in html and "<img>" not in html and "&lt;script&gt;" in html


def test_overallocated_gpu_is_outlined_red() -> None:
    over = {"name": "s", "cases": [{"name": "c", "result": "passed", "details": {"placements": [
        {"pod": "a", "node": "n", "gpu": 0, "fraction": 0.75}, {"pod": "b", "node": "n", "gpu": 0, "fraction": 0.5}]}}]}
    pics = report.gpu_allocations([over], {})
    assert pics[0]["rows"][0]["cells"][0]["over"] is True


@pytest.mark.skipif(screenshot.find_browser() is None,
                    reason="no chromium: apt-get install -y chromium to screenshot the report")
def test_report_screenshot(tmp_path: Path, suites: list[base.SuiteResult], ci_key: Any) -> None:
    statement = evidence.build_statement(
        bundle="gpu-scheduling", version="0.1.0", profile="sim", digest="sha256:" + "a1" * 32,
        cluster=sample.CLUSTER, tools={}, suites=suites, started=0.0, finished=60.0,
    )
    paths = evidence.write_evidence(tmp_path / "ev", statement, ci_key.private_path)
    png = screenshot.screenshot(paths.report, tmp_path / "report.png")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 1600)
    assert len(data) > 30_000  # a blank page compresses to a few KB; the report's pictures do not


def test_report_says_where_the_faults_came_from() -> None:
    statement = _statement([])
    statement["predicate"]["cluster"] = {**sample.CLUSTER, "faultInjection": "pod",
                                         "faultInjectionNote": "synthetic faults: <a privileged pod>",
                                         "faultInjectionPods": [{"node": "n"}, {"node": "m"}]}
    html = report.render(statement)
    assert "<td>faults</td><td>pod: synthetic faults: &lt;a privileged pod&gt; (2 injector pods)</td>" in html
