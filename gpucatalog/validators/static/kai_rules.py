"""Static checks of KAI Scheduler ``Queue`` objects: what KAI would reject or silently mis-handle,
found before anything is installed.

Called by ``catalog validate`` (on every rendered manifest of a bundle) and usable on its own:
``check_queues(objs)`` returns findings, ``require_valid_queues(objs)`` raises ``CheckFailed``.
Objects are plain dicts as rendered; anything that is not a ``scheduling.run.ai`` Queue is ignored.

Rules (the ``rule`` of each finding):

- ``kai-queue-resources``: ``spec.resources`` missing (KAI's queue webhook refuses the queue).
- ``kai-queue-field``: a resource lacks ``quota``, ``limit`` or ``overQuotaWeight``. KAI has no
  defaulting for them, so a missing ``limit`` silently means 0 (nothing beyond quota).
- ``kai-queue-number``: a value that is not a number.
- ``kai-queue-negative``: a negative quota or limit other than KAI's -1 sentinel ("unlimited" /
  "no limit"), or a negative over-quota weight.
- ``kai-queue-limit-below-quota``: ``limit`` below ``quota``.
- ``kai-queue-duplicate``: two queues of the same name (queues are cluster-scoped).
- ``kai-queue-unknown-parent``: ``spec.parentQueue`` names no queue in the set.
- ``kai-queue-cycle``: parents form a cycle.
- ``kai-queue-children-over-parent``: the children's quotas of one resource add up to more than
  the parent's (an unlimited child under a limited parent counts as over).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpucatalog.core import errors

GROUP = "scheduling.run.ai"
RESOURCES = ("gpu", "cpu", "memory")
FIELDS = ("quota", "limit", "overQuotaWeight")
UNLIMITED = -1.0
# Sums of fractional GPU quotas are compared with this slack (0.1 + 0.2 > 0.3 in binary floats).
EPSILON = 1e-9


def is_queue(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Queue" and str(obj.get("apiVersion", "")).startswith(GROUP + "/")


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", "<unnamed>"))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class _Checker:
    def __init__(self, component: str) -> None:
        self.component = component
        self.findings: list[errors.Finding] = []

    def add(self, rule: str, queue: str, field: str, message: str) -> None:
        self.findings.append(errors.Finding(rule=rule, message=message, component=self.component,
                                            obj=f"Queue/{queue}", field=field))

    def resource_values(self, name: str, spec: Mapping[str, Any]) -> dict[str, dict[str, float]]:
        """Check one queue's numbers; return the valid ones by resource and field."""
        values: dict[str, dict[str, float]] = {}
        resources = spec.get("resources")
        if not isinstance(resources, Mapping):
            self.add("kai-queue-resources", name, "spec.resources",
                     "missing; KAI refuses a queue without resources (set gpu, cpu and memory)")
            return values
        for res in RESOURCES:
            block = resources.get(res)
            if block is None:
                continue
            base = f"spec.resources.{res}"
            if not isinstance(block, Mapping):
                self.add("kai-queue-field", name, base, "must be an object with quota, limit, overQuotaWeight")
                continue
            got: dict[str, float] = {}
            for fld in FIELDS:
                if fld not in block:
                    self.add("kai-queue-field", name, f"{base}.{fld}",
                             "missing; KAI does not default it (a missing limit means 0)")
                    continue
                num = _number(block[fld])
                if num is None:
                    self.add("kai-queue-number", name, f"{base}.{fld}", f"{block[fld]!r} is not a number")
                    continue
                if fld == "overQuotaWeight" and num < 0:
                    self.add("kai-queue-negative", name, f"{base}.{fld}", f"{block[fld]} must be >= 0")
                elif fld != "overQuotaWeight" and num < 0 and num != UNLIMITED:
                    self.add("kai-queue-negative", name, f"{base}.{fld}",
                             f"{block[fld]} is negative; use -1 for unlimited or a value >= 0")
                else:
                    got[fld] = num
            quota, limit = got.get("quota"), got.get("limit")
            if quota is not None and limit is not None and UNLIMITED not in (quota, limit) and limit < quota:
                self.add("kai-queue-limit-below-quota", name, f"{base}.limit",
                         f"limit {block['limit']} is below quota {block['quota']}")
            values[res] = got
        return values


def check_queues(objs: Iterable[Mapping[str, Any]], component: str = "") -> list[errors.Finding]:
    """Every finding for the Queue objects among ``objs`` (other kinds are ignored)."""
    chk = _Checker(component)
    parents: dict[str, str] = {}
    numbers: dict[str, dict[str, dict[str, float]]] = {}
    for obj in objs:
        if not is_queue(obj):
            continue
        name = _name(obj)
        if name in numbers:
            chk.add("kai-queue-duplicate", name, "metadata.name", "defined twice; queues are cluster-scoped")
            continue
        spec = obj.get("spec") or {}
        numbers[name] = chk.resource_values(name, spec)
        parent = spec.get("parentQueue") or ""
        if parent:
            parents[name] = str(parent)
    for name, parent in sorted(parents.items()):
        if parent not in numbers:
            known = ", ".join(sorted(numbers)) or "none"
            chk.add("kai-queue-unknown-parent", name, "spec.parentQueue",
                    f"parent {parent!r} is not among the queues (known: {known})")
    _check_cycles(chk, parents)
    _check_children(chk, parents, numbers)
    return chk.findings


def _check_cycles(chk: _Checker, parents: Mapping[str, str]) -> None:
    reported: set[str] = set()
    for start in sorted(parents):
        path = [start]
        cur = start
        while cur in parents:
            cur = parents[cur]
            if cur in path:
                cycle = path[path.index(cur):] + [cur]
                if not reported & set(cycle):
                    chk.add("kai-queue-cycle", cur, "spec.parentQueue",
                            "parents form a cycle: " + " -> ".join(cycle))
                    reported.update(cycle)
                break
            path.append(cur)


def _check_children(chk: _Checker, parents: Mapping[str, str],
                    numbers: Mapping[str, Mapping[str, Mapping[str, float]]]) -> None:
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        if parent in numbers:
            children.setdefault(parent, []).append(child)
    for parent, kids in sorted(children.items()):
        for res in RESOURCES:
            pq = numbers[parent].get(res, {}).get("quota")
            if pq is None or pq == UNLIMITED:
                continue
            quotas = {k: numbers[k].get(res, {}).get("quota") for k in sorted(kids)}
            known = {k: q for k, q in quotas.items() if q is not None}
            unlimited = [k for k, q in known.items() if q == UNLIMITED]
            total = sum(q for q in known.values() if q != UNLIMITED)
            if unlimited:
                chk.add("kai-queue-children-over-parent", parent, f"spec.resources.{res}.quota",
                        f"children {', '.join(unlimited)} have unlimited {res} quota under a parent "
                        f"limited to {pq:g}")
            elif total > pq + EPSILON:
                parts = ", ".join(f"{k}={q:g}" for k, q in known.items())
                chk.add("kai-queue-children-over-parent", parent, f"spec.resources.{res}.quota",
                        f"children guarantee {total:g} {res} ({parts}) but the parent's quota is {pq:g}")


def require_valid_queues(objs: Iterable[Mapping[str, Any]], component: str = "") -> None:
    """Raise ``CheckFailed`` with every finding when any Queue would be rejected or mis-handled."""
    findings = check_queues(objs, component)
    if findings:
        raise errors.CheckFailed(f"{len(findings)} KAI queue problem(s)", findings)
