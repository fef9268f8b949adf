"""Turn an agent cycle's observation into Node conditions (one per fault family, plus the probe
error condition) and Events (non-fatal findings), and read a condition's action back.

Message grammar (the controller depends on it): ``action=<ACTION>; <finding> | <finding> …``
where ``<ACTION>`` is the strongest action among the family's fatal findings. Pure functions;
called by the agent (write side) and the controller (read side).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpucatalog.gpuhealth.findings import (
    FAULT_CONDITIONS,
    PROBE_ERROR_CONDITION,
    PROBE_FAMILIES,
    Family,
    Finding,
    Observation,
)
from gpucatalog.gpuhealth.xidpolicy import Action

MAX_MESSAGE = 1024
_ACTION = re.compile(r"^action=([A-Z_]+);")


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str

    def to_api(self, now_iso: str, previous: dict[str, Any] | None = None) -> dict[str, Any]:
        """Node condition dict; ``lastTransitionTime`` only moves when the status changes."""
        transition = now_iso
        if previous and previous.get("status") == self.status and previous.get("lastTransitionTime"):
            transition = str(previous["lastTransitionTime"])
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastHeartbeatTime": now_iso,
            "lastTransitionTime": transition,
        }


@dataclass(frozen=True)
class EventSpec:
    key: str
    type: str  # "Warning" | "Normal"
    reason: str
    message: str


def _truncate(parts: list[str], head: str) -> str:
    msg = head + " | ".join(parts)
    if len(msg) <= MAX_MESSAGE:
        return msg
    kept: list[str] = []
    for p in parts:
        trial = head + " | ".join([*kept, p]) + f" (+{len(parts) - len(kept) - 1} more)"
        if len(trial) > MAX_MESSAGE:
            break
        kept.append(p)
    return head + " | ".join(kept) + f" (+{len(parts) - len(kept)} more)"


def build(obs: Observation) -> tuple[list[Condition], list[EventSpec]]:
    failed_families = {f for probe in obs.probe_errors for f in PROBE_FAMILIES.get(probe, ())}
    conds: list[Condition] = []
    for fam in Family:
        fatal = [f for f in obs.findings if f.family is fam and f.fatal]
        if fatal:
            strongest = max(f.action for f in fatal)
            reasons = sorted({f.reason for f in fatal})
            reason = reasons[0] if len(reasons) == 1 else "MultipleFaults"
            conds.append(
                Condition(fam.value, "True", reason, _truncate([f.text() for f in fatal], f"action={strongest.name}; "))
            )
        elif fam in failed_families:
            conds.append(Condition(fam.value, "Unknown", "ProbeFailed", "probe failed; see GpuHealthProbeError"))
        elif obs.notes.get(fam):
            conds.append(Condition(fam.value, "False", "NoFault",
                                   _truncate(obs.notes[fam], f"no {fam.value} fault found; not judged: ")))
        else:
            conds.append(Condition(fam.value, "False", "NoFault", f"no {fam.value} fault found"))
    if obs.probe_errors:
        parts = [f"{k}: {v}" for k, v in sorted(obs.probe_errors.items())]
        conds.append(Condition(PROBE_ERROR_CONDITION, "True", "ProbeFailed", _truncate(parts, "")))
    else:
        conds.append(Condition(PROBE_ERROR_CONDITION, "False", "ProbesOk", "all probes read their input"))
    events = [
        EventSpec(f.key, "Warning", f.reason, f.text()[:MAX_MESSAGE])
        for f in obs.findings
        if not f.fatal
    ]
    return conds, events


def action_of(condition: dict[str, Any]) -> Action | None:
    """The action a True fault condition asks for, or ``None`` when the condition is not a fault."""
    if condition.get("type") not in FAULT_CONDITIONS or condition.get("status") != "True":
        return None
    m = _ACTION.match(str(condition.get("message", "")))
    if not m:
        return Action.HARDWARE_REPAIR  # a fault we cannot classify needs a person
    try:
        return Action[m.group(1)]
    except KeyError:
        return Action.HARDWARE_REPAIR


def summarize(findings: list[Finding]) -> str:
    return "; ".join(f.text() for f in findings if f.fatal)
