"""The evidence writers take every placement shape KAI really produces and any odd value a case
may record in its free-form details: the report and JUnit always render, and a rendering that
fails anyway never costs the signed envelope."""

from __future__ import annotations

import json
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucatalog.pipelines import evidence, junit, keys, report, sample

ODD = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
GPU_ID = st.one_of(
    st.integers(min_value=-3, max_value=200), st.none(), st.just(""),
    st.builds(lambda g, u: f"{g}/GPU-{u}", st.uuids().map(str), st.uuids().map(str)),  # KAI: group/GPU-<uuid>
    st.uuids().map(str), ODD,
)
PLACEMENT = st.fixed_dictionaries(
    {},
    optional={
        "pod": st.text(max_size=12) | ODD, "node": st.sampled_from(["n1", "n2"]) | ODD, "gpu": GPU_ID,
        "fraction": st.none() | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.5, 0.7, 0.25]) | ODD,
        "gpus": st.none() | st.integers(min_value=-2, max_value=10**9) | ODD,
    },
)
STEP = st.fixed_dictionaries({}, optional={"state": ODD, "t": st.floats(allow_nan=True, allow_infinity=True) | ODD})
POINT = st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-10**400, max_value=10**400) | ODD,
                 max_size=3)
DETAILS = st.fixed_dictionaries(
    {}, optional={"placements": st.lists(PLACEMENT, max_size=12) | ODD, "steps": st.lists(STEP, max_size=6) | ODD,
                  "series": st.dictionaries(st.text(max_size=5), st.lists(POINT, max_size=4) | ODD, max_size=3) | ODD,
                  "floor": st.fixed_dictionaries({}, optional={"pods": ODD, "seconds": ODD}) | ODD,
                  "over_floor_s": ODD, "node": ODD, "latency": ODD, "odd": ODD},
)
CASE = st.fixed_dictionaries({
    "name": st.text(max_size=30), "result": st.sampled_from(["passed", "failed", "skipped", "weird"]),
    "reason": st.text(max_size=60), "seconds": st.floats(allow_nan=True, allow_infinity=True) | st.integers(),
    "details": DETAILS,
})
SUITES = st.lists(st.fixed_dictionaries({"name": st.text(min_size=1, max_size=20), "cases": st.lists(CASE, max_size=5)}),
                  min_size=1, max_size=3)


def _statement(suites: list[Any]) -> dict[str, Any]:
    return evidence.build_statement(bundle="gpu-scheduling", version="0.1.0", profile="sim",
                                    digest="sha256:" + "a1" * 32, cluster=sample.CLUSTER, tools={"helm": "v4.3.2"},
                                    suites=suites, started=0.0, finished=60.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(odd_suites=SUITES)
def test_report_and_junit_render_whatever_the_details_hold(odd_suites: list[Any]) -> None:
    statement = _statement(odd_suites)
    json.dumps(statement, allow_nan=False)  # the statement is plain JSON, whatever went in
    page = report.render(statement)
    assert page.rstrip().endswith("</html>")
    ET.fromstring(junit.render(statement["predicate"]).encode())


def test_kai_placement_shapes_are_drawn() -> None:
    """What the fraction suite records against real KAI: GPU-group strings with the reported
    GPU id, whole-GPU pods with no fraction, a group without a report yet."""
    placements = [
        {"pod": "half-0", "node": "n1", "gpu": "4b1c/GPU-5effb4b4-0d2f-11ee-be56-0242ac120002", "fraction": 0.5, "gpus": None},
        {"pod": "half-1", "node": "n1", "gpu": "4b1c/GPU-5effb4b4-0d2f-11ee-be56-0242ac120002", "fraction": 0.5, "gpus": None},
        {"pod": "whole-0", "node": "n1", "gpu": None, "fraction": None, "gpus": 2},
        {"pod": "mem", "node": "n2", "gpu": "77aa", "fraction": 0.25, "gpus": None},
    ]
    suites = [{"name": "fractional_gpu", "cases": [{"name": "c", "result": "passed", "details": {"placements": placements}}]}]
    (pic,) = report.gpu_allocations(suites, {"nodes": [{"name": "n1", "gpus": 8}, {"name": "n2", "gpus": 8}]})
    n1 = next(r for r in pic["rows"] if r["node"] == "n1")
    shared = [c for c in n1["cells"] if c["gpu"].startswith("4b1c/")]
    assert len(shared) == 1 and shared[0]["used"] == "1" and not shared[0]["over"]
    assert sum(1 for c in n1["cells"] if c["gpu"] == "whole") == 2
    assert len(n1["cells"]) == 8  # named and whole GPUs take the node's free columns
    page = report.render(_statement(suites))
    assert "half-0: 0.5 of GPU 4b1c/GPU-5effb4b4-0d2f-11ee-be56-0242ac120002 on n1" in page


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(odd_suites=SUITES)
def test_a_report_that_cannot_render_never_loses_the_signed_envelope(
        odd_suites: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_statement: Any) -> str:
        raise ValueError("cannot draw this")

    monkeypatch.setattr(report, "render", broken)
    with tempfile.TemporaryDirectory() as tmp:
        key = keys.generate(Path(tmp) / "keys", "ci")
        paths = evidence.write_evidence(Path(tmp) / "ev", _statement(odd_suites), key.private_path)
        env = json.loads(paths.envelope.read_text())
        st_ = evidence.verify(env, {key.keyid: keys.load_public(key.public_path)})
        assert st_ == json.loads(paths.statement.read_text())
        assert "The report could not be drawn: <code>ValueError: cannot draw this</code>" in paths.report.read_text()
        ET.fromstring(paths.junit.read_text().encode())


def test_odd_values_are_signed_as_plain_json(tmp_path: Path) -> None:
    key = keys.generate(tmp_path / "keys", "ci")
    odd = {"name": "s", "cases": [{"name": "c", "result": "passed", "seconds": float("nan"),
                                   "details": {"set": {3, 1}, "nan": float("inf"), "tuple": (1, "a"), 5: object()}}]}
    paths = evidence.write_evidence(tmp_path / "ev", _statement([odd]), key.private_path)
    st_ = evidence.verify(json.loads(paths.envelope.read_text()), {key.keyid: keys.load_public(key.public_path)})
    case = st_["predicate"]["suites"][0]["cases"][0]
    assert case["seconds"] == 0.0
    assert case["details"]["set"] == [1, 3] and case["details"]["nan"] is None and case["details"]["tuple"] == [1, "a"]
    assert case["details"]["5"].startswith("<object object")
