"""What every conformance suite shares: the context it runs in, per-case results and timing,
and waiting on observable state with a timeout that names what it waited for.

Called by each suite module; the certify pipeline turns ``SuiteResult`` lists into JSON,
JUnit and HTML.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from gpucatalog.core import errors

# A case passed, failed, or was not run ("skipped": its reason says why). Every case of a suite
# is required: one not run makes the suite "incomplete", which is never a pass.
Result = Literal["passed", "failed", "skipped"]
Verdict = Literal["passed", "failed", "incomplete"]
T = TypeVar("T")


class CaseFailed(errors.CheckFailed):
    """A case's expectation did not hold; the message is the reason shown to the user."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


class WaitTimeout(CaseFailed):
    """A wait ran out; the message names the condition that never became true."""


class CaseNotRun(errors.CatalogError):
    """A case cannot run on this cluster (no fault injection, …): recorded as not run, which
    makes its suite incomplete, never passed. The message says what is missing."""


@dataclass
class CaseResult:
    name: str
    result: Result
    reason: str = ""
    seconds: float = 0.0
    # Free-form observations for reports: step timestamps, GPU placements, latencies …
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "result": self.result,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
            "details": self.details,
        }


@dataclass
class SuiteResult:
    name: str
    cases: list[CaseResult]
    seconds: float = 0.0
    started: float = 0.0

    @property
    def result(self) -> Verdict:
        return verdict([c.result for c in self.cases])

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "result": self.result,
            "seconds": round(self.seconds, 3),
            "started": self.started,
            "cases": [c.to_dict() for c in self.cases],
        }


@dataclass
class SuiteContext:
    """Where a suite runs. ``kubeconfig`` is the only way to the cluster."""

    kubeconfig: Path
    namespace_prefix: str = "conformance"
    timeout_scale: float = 1.0
    # Facts of the installed bundle a suite may need (e.g. values of team-queues, GPU memory).
    params: dict[str, Any] = field(default_factory=dict)
    # Extra endpoints a suite may use besides Kubernetes (e.g. {"slurm_conf": "/path/slurm.conf"}).
    endpoints: dict[str, str] = field(default_factory=dict)
    log: Callable[[str], None] = lambda _m: None


def verdict(case_results: list[str]) -> Verdict:
    """A suite's verdict from its cases: failed if any failed (or none ran at all), incomplete if
    any was not run, passed only when every case passed."""
    if not case_results or "failed" in case_results:
        return "failed"
    if any(r != "passed" for r in case_results):
        return "incomplete"
    return "passed"


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns a truthy value; raise ``WaitTimeout`` naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


Case = Callable[[SuiteContext, CaseResult], None]


def run_cases(name: str, ctx: SuiteContext, cases: list[tuple[str, Case]]) -> SuiteResult:
    """Run each case, timing it; a ``CaseFailed`` (or other ``CatalogError``) fails only that case."""
    started = time.time()
    t0 = time.monotonic()
    results: list[CaseResult] = []
    for case_name, fn in cases:
        res = CaseResult(name=case_name, result="passed")
        c0 = time.monotonic()
        ctx.log(f"{name}/{case_name}: running")
        try:
            fn(ctx, res)
        except CaseNotRun as exc:
            res.result = "skipped"
            res.reason = f"not run: {exc}"
        except errors.CatalogError as exc:
            res.result = "failed"
            res.reason = str(exc)
        res.seconds = time.monotonic() - c0
        ctx.log(f"{name}/{case_name}: {res.result} {res.reason}")
        results.append(res)
    return SuiteResult(name=name, cases=results, seconds=time.monotonic() - t0, started=started)
