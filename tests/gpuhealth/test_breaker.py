"""Circuit breaker rules (shaped after NVSentinel's breaker tests) and their persistence."""

from __future__ import annotations

from gpucatalog.gpuhealth.breaker import CLOSED, TRIPPED, Breaker

T0 = 1_800_000_000.0


def test_does_not_trip_below_threshold() -> None:
    b = Breaker(max_share=0.5)
    assert all(b.admit(f"n{i}", T0, 10) for i in range(5)) and b.status == CLOSED


def test_trips_when_above_threshold_and_latches() -> None:
    b = Breaker(max_share=0.5)
    for i in range(5):
        b.admit(f"n{i}", T0, 10)
    assert not b.admit("n5", T0, 10) and b.status == TRIPPED and "limit 5" in b.tripped_reason
    assert b.admit("n0", T0 + 1, 10)  # a node already counted may be re-quarantined
    assert not b.admit("n6", T0 + 10_000, 10)  # window passed, still tripped


def test_flapping_node_counts_once() -> None:
    b = Breaker(max_share=0.2)
    assert all(b.admit("n1", T0 + i, 10) for i in range(10))
    assert len(b.entries) == 1 and b.status == CLOSED


def test_window_expiry_frees_budget() -> None:
    b = Breaker(max_share=0.2, window_s=60)
    assert b.admit("n1", T0, 10) and b.admit("n2", T0, 10)
    assert b.admit("n3", T0 + 61, 10)  # n1, n2 left the window


def test_active_remediations_count_against_the_limit() -> None:
    b = Breaker(max_share=0.2, window_s=60)
    assert not b.admit("n3", T0 + 1000, 10, active={"n1", "n2"})


def test_tiny_cluster_may_always_remediate_one_node() -> None:
    assert Breaker(max_share=0.1).limit(3) == 1


def test_persisted_state_survives_restart_and_human_reset() -> None:
    b = Breaker(max_share=0.2)
    b.admit("n1", T0, 5)
    b.admit("n2", T0, 5)
    data = b.to_data(5)
    assert data["status"] == TRIPPED and data["limit"] == "1"
    again = Breaker.from_data(data, 0.2, 600)
    assert again.status == TRIPPED and again.entries == {"n1": T0}
    data["status"] = CLOSED  # the human edit
    data["entries"] = ""
    closed = Breaker.from_data(data, 0.2, 600)
    assert closed.status == CLOSED and closed.tripped_at is None
    assert Breaker.from_data({"entries": "{not json"}, 0.2, 600).entries == {}
