"""What every conformance suite shares: the context it runs in (with the one place timeouts are
scaled), per-case results and timing, running cases (optionally behind a preflight), and waiting
on observable state with a timeout that names what it waited for.

Called by each suite module; the certify pipeline builds the ``SuiteContext`` and turns
``SuiteResult`` lists into JSON, JUnit and HTML.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from gpucatalog.core import errors

Result = Literal["passed", "failed", "skipped"]
T = TypeVar("T")


class CaseFailed(errors.CheckFailed):
    """A case's expectation did not hold; the message is the reason shown to the user."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


class WaitTimeout(CaseFailed):
    """A wait ran out; the message names the condition that never became true."""


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
    def result(self) -> Result:
        if any(c.result == "failed" for c in self.cases) or not self.cases:
            return "failed"
        return "passed"

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
    """Where a suite runs. ``kubeconfig`` is the only way to the cluster (a Kubernetes suite
    opens its client from it: ``kube.Kube(ctx.kubeconfig)``)."""

    kubeconfig: Path
    namespace_prefix: str = "conformance"
    # Multiplies every timeout a suite waits for (a slow cluster gets more time); see ``scaled``.
    timeout_scale: float = 1.0
    # Facts of the installed bundle a suite may need (e.g. values of team-queues, GPU memory).
    params: dict[str, Any] = field(default_factory=dict)
    # Extra endpoints a suite may use besides Kubernetes (e.g. {"slurm_conf": "/path/slurm.conf"}).
    endpoints: dict[str, str] = field(default_factory=dict)
    log: Callable[[str], None] = lambda _m: None

    def scaled(self, seconds: float) -> float:
        """``seconds`` (a suite's timeout for a normal cluster) times ``timeout_scale``."""
        return seconds * self.timeout_scale


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.2,
             guard: Callable[[], None] | None = None) -> T:
    """Poll ``probe`` until it returns a truthy value; raise ``WaitTimeout`` naming ``what``.

    ``guard`` runs before each probe and may raise to end the wait early (e.g. a watchdog that
    sees a component crash)."""
    deadline = time.monotonic() + timeout
    while True:
        if guard is not None:
            guard()
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def holds(what: str, probe: Callable[[], bool], seconds: float, interval: float = 0.5,
          guard: Callable[[], None] | None = None) -> None:
    """Check that ``probe`` stays true for ``seconds`` (e.g. pods stay pending); fail naming
    ``what``. A probe may raise ``CaseFailed`` itself to name what changed more precisely."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if guard is not None:
            guard()
        if not probe():
            raise CaseFailed(f"expected {what} for {seconds:.0f}s, but it changed")
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
        except errors.CatalogError as exc:
            res.result = "failed"
            res.reason = str(exc)
        res.seconds = time.monotonic() - c0
        ctx.log(f"{name}/{case_name}: {res.result} {res.reason}")
        results.append(res)
    return SuiteResult(name=name, cases=results, seconds=time.monotonic() - t0, started=started)


def run_with_preflight(name: str, ctx: SuiteContext, pre: Case, cases: list[tuple[str, Case]]) -> SuiteResult:
    """Run the preflight case first; if it fails, report every other case as not run (with the
    preflight's reason) instead of letting each wait out its timeout."""
    result = run_cases(name, ctx, [("preflight", pre)])
    first = result.cases[0]
    if first.result == "failed":
        for case_name, _fn in cases:
            result.cases.append(CaseResult(case_name, "skipped", "not run: preflight failed (see its reason)"))
        return result
    rest = run_cases(name, ctx, cases)
    result.cases.extend(rest.cases)
    result.seconds += rest.seconds
    return result
