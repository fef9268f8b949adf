"""``fault_remediation`` cases that passed without testing their claim (issue 14, item 11): old
Events no longer satisfy a wait; the breaker case's name no longer claims a share it does not
inject."""

from __future__ import annotations

import datetime as dt
import time

from gpucatalog.validators.conformance.remediation import contract as rc
from gpucatalog.validators.conformance.remediation import fault_remediation


def test_old_events_do_not_satisfy_a_new_wait() -> None:
    def at(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    now = time.time()
    old = {"reason": "Xid13", "lastTimestamp": at(now - 3600)}
    new = {"reason": "Xid13", "eventTime": at(now).replace("Z", ".123456Z")}
    assert rc.events_since([old, new], now) == [new]
    assert rc.events_since([old], now) == []  # before: [old] satisfied the wait
    assert rc.events_since([{"metadata": {"creationTimestamp": at(now)}}], now)


def test_breaker_case_name_claims_no_share_it_does_not_inject() -> None:
    names = [n for n, _ in fault_remediation.CASES]
    assert "breaker_caps_quarantines_at_60pct_faults" not in names
    assert "breaker_caps_quarantines_when_most_nodes_fault" in names
