"""Lease rules: take a free or expired lease, renew our own, leave a live foreign one alone."""

from __future__ import annotations

from gpucatalog.gpuhealth import engine, leader

T0 = 1_800_000_000.0


def test_lease_rules() -> None:
    first = leader.next_spec(None, "a", T0, 15)
    assert first is not None and first["holderIdentity"] == "a" and first["leaseTransitions"] == 1
    assert leader.next_spec(first, "b", T0 + 5, 15) is None
    renewed = leader.next_spec(first, "a", T0 + 5, 15)
    assert renewed is not None and renewed["acquireTime"] == first["acquireTime"]
    assert renewed["renewTime"] == engine.iso(T0 + 5) and renewed["leaseTransitions"] == 1
    taken = leader.next_spec(renewed, "b", T0 + 21, 15)
    assert taken is not None and taken["holderIdentity"] == "b" and taken["leaseTransitions"] == 2
