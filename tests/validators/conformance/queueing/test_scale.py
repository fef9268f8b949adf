"""The scale cases' parameters, thresholds and series (no cluster: tests/validators/conformance/
kueue/test_contract_live.py runs the suite on a live Kueue)."""

from __future__ import annotations

import pytest

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.queueing import scale

THRESHOLDS = {"fill_s": 1, "fill_with_backlog_s": 2, "reclaim_one_gpu_p95_s": 3, "large_job_reclaim_s": 4,
              "distributed_job_s": 5}


def test_parse_reads_sizes_and_thresholds() -> None:
    p = scale.parse({"thresholds": THRESHOLDS, "jobs": 4000, "backlog": 1.5, "stack": "kueue", "bundle_values": {}})
    assert (p.jobs, p.backlog, p.teams) == (4000, 1.5, 4)
    assert p.thresholds["distributed_job_s"] == 5.0


@pytest.mark.parametrize(("raw", "named"), [
    ({}, "suiteParams.scale.thresholds is missing"),
    ({"thresholds": {**THRESHOLDS, "fill_s": 0}}, "fill_s must be positive numbers of seconds"),
    ({"thresholds": {k: v for k, v in THRESHOLDS.items() if k != "distributed_job_s"}}, "distributed_job_s must be"),
    ({"thresholds": {**THRESHOLDS, "fill_seconds": 3}}, "unknown fill_seconds"),
    ({"thresholds": {**THRESHOLDS, "fill_s": True}}, "fill_s must be"),
    ({"thresholds": THRESHOLDS, "jobs": 1.5}, "suiteParams.scale.jobs: expected a whole number"),
    ({"thresholds": THRESHOLDS, "teams": 0}, "teams and reclaim_samples must be at least 1"),
    ({"thresholds": THRESHOLDS, "backlog": "2"}, "suiteParams.scale.backlog: expected a number"),
])
def test_parse_names_the_bad_field(raw: dict[str, object], named: str) -> None:
    with pytest.raises(base.CaseFailed, match=named):
        scale.parse(raw)


def test_within_records_the_figure_and_fails_above_the_threshold() -> None:
    p = scale.parse({"thresholds": THRESHOLDS})
    res = base.CaseResult("fill_single_gpu_jobs", "passed")
    scale.within(res, "fill_single_gpu_jobs", 0.9, p)
    assert res.details["figure"] == {"name": "fill_s", "seconds": 0.9, "threshold": 1.0}
    with pytest.raises(base.CaseFailed, match=r"fill_s 1\.5s is above the bundle's threshold of 1s"):
        scale.within(res, "fill_single_gpu_jobs", 1.5, p)


def test_shares_split_evenly_and_add_up() -> None:
    assert scale.shares(10, 4) == [3, 3, 2, 2]
    assert scale.shares(3, 3) == [1, 1, 1]
    assert sum(scale.shares(4001, 7)) == 4001


def test_series_counts_units_running_at_even_steps_per_team() -> None:
    out = scale.series({"a": [100.0, 101.0, 104.0], "b": [102.0]}, 100.0, points=5)
    assert out["a"] == [[0.0, 1], [1.0, 2], [2.0, 2], [3.0, 2], [4.0, 3]]
    assert out["b"] == [[0.0, 0], [1.0, 0], [2.0, 1], [3.0, 1], [4.0, 1]]
    assert scale.series({}, 0.0) == {}
