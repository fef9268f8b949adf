"""What gpu-health promises to write on a Node, as the ``fault_remediation`` suite reads it: the
state label, the annotations (timeline, skip reason, repair action, who cordoned), the breaker
ConfigMap's name, and readers over a Node as plain JSON.

Written down here on purpose, not imported from gpu-health: the suite checks the observable
contract, so a renamed label in the implementation fails the suite instead of following it.
Called by ``remediation.env``, ``fault_remediation`` and ``bench/gpuhealth_latency.py``.
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any

PREFIX = "gpu-health.gpu-catalog.io/"
STATE = PREFIX + "state"
TIMELINE = PREFIX + "timeline"
SKIPPED = PREFIX + "skipped"
RESOLVED = PREFIX + "resolved"
ACTION = PREFIX + "repair-action"
CORDONED_BY = PREFIX + "cordoned-by"
# when each recent fault happened: enough of them in the flap window send a node to hardware repair
FAULT_HISTORY = PREFIX + "fault-history"
BREAKER_CM = "gpu-health-breaker"
# The PCIe link: one condition type, two finding reasons (a Warning Event when a finding is not
# a fault, the condition's reason when it is)
PCIE = "GpuPcieDegraded"
PCIE_REASONS = ("PcieGenDegraded", "PcieWidthDegraded")


def labels(n: dict[str, Any]) -> dict[str, str]:
    return dict(n["metadata"].get("labels") or {})


def annots(n: dict[str, Any]) -> dict[str, str]:
    return dict(n["metadata"].get("annotations") or {})


def state(n: dict[str, Any]) -> str:
    return labels(n).get(STATE, "healthy")


def cordoned(n: dict[str, Any]) -> bool:
    return bool((n.get("spec") or {}).get("unschedulable"))


def condition(n: dict[str, Any], ctype: str) -> dict[str, Any]:
    for c in (n.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return {}


def describe(n: dict[str, Any]) -> str:
    """One line on where gpu-health left ``n``: what a timed-out wait adds to its reason, so a failed
    case says which step the node was stuck in without the controller's log."""
    shown = {k.removeprefix(PREFIX): v[:160] for k, v in annots(n).items()
             if k.startswith(PREFIX) and k != FAULT_HISTORY}
    return f"state {state(n)}, {'cordoned' if cordoned(n) else 'schedulable'}, annotations {shown}"


def timeline(n: dict[str, Any]) -> dict[str, str]:
    """The controller's ``{state: ISO time}`` timeline annotation ({} when absent or unreadable)."""
    try:
        value = json.loads(annots(n).get(TIMELINE) or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z"


def as_steps(times: dict[str, str], t0: float) -> list[dict[str, Any]]:
    """``{state: ISO time}`` as the report's ``[{state, t}]`` (seconds since the fault), in order."""
    steps = []
    for state_name, iso in times.items():
        try:
            at = datetime.datetime.fromisoformat(iso).timestamp()
        except (TypeError, ValueError):
            continue
        steps.append({"state": state_name, "t": round(at - t0, 3)})
    return sorted(steps, key=lambda st: float(st["t"]))


def event_time(e: dict[str, Any]) -> float:
    """When an Event last happened (seconds since the epoch; 0 when it carries no time)."""
    meta = e.get("metadata") or {}
    for t in (e.get("eventTime"), e.get("lastTimestamp"), e.get("firstTimestamp"), meta.get("creationTimestamp")):
        if isinstance(t, str) and t:
            try:
                return datetime.datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0


def events_since(items: list[dict[str, Any]], since: float) -> list[dict[str, Any]]:
    """Events that happened at or after ``since`` (a second of slack for the API server's
    whole-second timestamps): an Event left by an earlier run must not satisfy this one."""
    return [e for e in items if event_time(e) >= since - 1.0]
