"""The pure parts of the KAI suites: placement accounting, oversubscription, fair share, percentiles."""

from __future__ import annotations

import pytest

from gpucatalog.validators.conformance import kai_math
from gpucatalog.validators.conformance.kai_math import Placement, QueueShare


def test_devices_used_counts_whole_gpus_and_distinct_shared_gpus() -> None:
    placements = [Placement("w1", "n1", gpus=2), Placement("f1", "n1", "g1", 0.5),
                  Placement("f2", "n1", "g1", 0.5), Placement("f3", "n1", "g2", 0.3),
                  Placement("f4", "n2", "g1", 0.7)]
    assert kai_math.devices_used(placements) == {"n1": 4.0, "n2": 1.0}


def test_no_oversubscription_when_fractions_fit() -> None:
    placements = [Placement("a", "n1", "g1", 0.5), Placement("b", "n1", "g1", 0.5),
                  Placement("c", "n1", "g2", 0.7), Placement("w", "n1", gpus=6)]
    assert kai_math.oversubscription(placements, {"n1": 8}) == []


def test_two_seventy_percent_fractions_on_one_gpu_are_oversubscription() -> None:
    placements = [Placement("a", "n1", "g1", 0.7), Placement("b", "n1", "g1", 0.7)]
    assert kai_math.oversubscription(placements, {"n1": 1}) == ["GPU g1 on n1 carries 1.4 of a device (a=0.7, b=0.7)"]


def test_whole_and_shared_gpus_above_node_capacity() -> None:
    placements = [Placement("w", "n1", gpus=8), Placement("f", "n1", "g9", 0.2)]
    assert kai_math.oversubscription(placements, {"n1": 8}) == ["node n1 uses 9 GPUs but has 8"]


def test_same_group_name_on_two_nodes_is_two_devices_and_missing_group_is_reported() -> None:
    placements = [Placement("a", "n1", "g", 0.6), Placement("b", "n2", "g", 0.6), Placement("c", "n2", "", 0.1)]
    assert kai_math.oversubscription(placements, {"n1": 1, "n2": 2}) == ["fraction pod c on n2 carries no GPU group"]


def test_fraction_sum_uses_float_slack() -> None:
    placements = [Placement(str(i), "n", "g", 0.1) for i in range(10)]
    assert kai_math.oversubscription(placements, {"n": 1}) == []


def test_fair_share_splits_spare_capacity_by_weight() -> None:
    share = kai_math.fair_share(8, {"w1": QueueShare(0, 1, 8), "w2": QueueShare(0, 2, 8)})
    assert share["w1"] == pytest.approx(8 / 3) and share["w2"] == pytest.approx(16 / 3)
    assert kai_math.whole_units(share) == {"w1": 2, "w2": 5}


def test_fair_share_gives_quota_first_then_weights() -> None:
    share = kai_math.fair_share(16, {"a": QueueShare(8, 1, 16), "b": QueueShare(4, 1, 16)})
    # 12 in quota, 4 spare split 1:1
    assert share == {"a": pytest.approx(10), "b": pytest.approx(6)}


def test_fair_share_returns_what_a_small_or_limited_queue_cannot_use() -> None:
    share = kai_math.fair_share(12, {"small": QueueShare(0, 1, 1), "capped": QueueShare(0, 1, 10, limit=3),
                                     "big": QueueShare(0, 1, 20)})
    assert share == {"small": pytest.approx(1), "capped": pytest.approx(3), "big": pytest.approx(8)}


def test_fair_share_unlimited_quota_and_zero_weight() -> None:
    share = kai_math.fair_share(4, {"u": QueueShare(-1, 1, 3), "z": QueueShare(0, 0, 4)})
    assert share == {"u": pytest.approx(3), "z": pytest.approx(0)}


def test_percentiles_nearest_rank() -> None:
    samples = [float(i) for i in range(1, 21)]  # 1..20
    assert kai_math.percentile(samples, 50) == 10.0
    assert kai_math.percentile(samples, 95) == 19.0
    assert kai_math.percentile([3.0], 95) == 3.0
    assert kai_math.latency_summary([2.0, 1.0, 4.0]) == {"count": 3, "p50": 2.0, "p95": 4.0, "max": 4.0}
    with pytest.raises(ValueError, match="no samples"):
        kai_math.percentile([], 50)


def test_placement_to_dict_for_reports() -> None:
    assert Placement("p", "n", "g", 0.5).to_dict() == {"pod": "p", "node": "n", "gpu": "g", "fraction": 0.5, "gpus": None}
