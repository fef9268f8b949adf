"""The pure parts of the queueing contract: the fair-share split and latency percentiles."""

from __future__ import annotations

import pytest

from gpucatalog.validators.conformance.queueing import math as queueing_math
from gpucatalog.validators.conformance.queueing.math import QueueShare


def test_fair_share_splits_spare_capacity_by_weight() -> None:
    share = queueing_math.fair_share(8, {"w1": QueueShare(0, 1, 8), "w2": QueueShare(0, 2, 8)})
    assert share["w1"] == pytest.approx(8 / 3) and share["w2"] == pytest.approx(16 / 3)
    assert queueing_math.whole_units(share) == {"w1": 2, "w2": 5}


def test_fair_share_gives_quota_first_then_weights() -> None:
    share = queueing_math.fair_share(16, {"a": QueueShare(8, 1, 16), "b": QueueShare(4, 1, 16)})
    # 12 in quota, 4 spare split 1:1
    assert share == {"a": pytest.approx(10), "b": pytest.approx(6)}


def test_fair_share_returns_what_a_small_or_limited_queue_cannot_use() -> None:
    share = queueing_math.fair_share(12, {"small": QueueShare(0, 1, 1), "capped": QueueShare(0, 1, 10, limit=3),
                                     "big": QueueShare(0, 1, 20)})
    assert share == {"small": pytest.approx(1), "capped": pytest.approx(3), "big": pytest.approx(8)}


def test_fair_share_unlimited_quota_and_zero_weight() -> None:
    share = queueing_math.fair_share(4, {"u": QueueShare(-1, 1, 3), "z": QueueShare(0, 0, 4)})
    assert share == {"u": pytest.approx(3), "z": pytest.approx(0)}


def test_percentiles_nearest_rank() -> None:
    samples = [float(i) for i in range(1, 21)]  # 1..20
    assert queueing_math.percentile(samples, 50) == 10.0
    assert queueing_math.percentile(samples, 95) == 19.0
    assert queueing_math.percentile([3.0], 95) == 3.0
    assert queueing_math.latency_summary([2.0, 1.0, 4.0]) == {"count": 3, "p50": 2.0, "p95": 4.0, "max": 4.0}
    with pytest.raises(ValueError, match="no samples"):
        queueing_math.percentile([], 50)
