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

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpucatalog.core import errors

# A case passed, failed, or was not run ("skipped": its reason says why). Every case of a suite
# is required: one not run makes the suite "incomplete", which is never a pass.
Result = Literal["passed", "failed", "skipped"]
Verdict = Literal["passed", "failed", "incomplete"]
T = TypeVar("T")

# Label on every namespace and object a suite creates (cleanup and kept-cluster runs find them by it)
SUITE_LABEL = "gpu-catalog.dev/conformance"


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


def verdict(case_results: list[str]) -> Verdict:
    """A suite's verdict from its cases: failed if any failed (or none ran at all), incomplete if
    any was not run, passed only when every case passed."""
    if not case_results or "failed" in case_results:
        return "failed"
    if any(r != "passed" for r in case_results):
        return "incomplete"
    return "passed"


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


def _reason(exc: BaseException) -> str:
    """A failure's reason, with the one it interrupted first: a cleanup wait that times out inside
    a ``finally`` must not hide why the case really failed."""
    own = str(exc) if isinstance(exc, errors.CatalogError) else f"{type(exc).__name__}: {exc}"
    first = exc.__context__
    if first is not None and first is not exc and isinstance(first, errors.CatalogError | ApiException | HTTPError | OSError):
        return f"{_reason(first)} (then, while cleaning up: {own})"
    return own


# What a case may raise besides our own errors: the Kubernetes client's, and an unreachable API.
CASE_ERRORS = (errors.CatalogError, ApiException, HTTPError, OSError, ValueError, KeyError, TypeError)


def run_cases(name: str, ctx: SuiteContext, cases: list[tuple[str, Case]]) -> SuiteResult:
    """Run each case, timing it; a ``CaseFailed``, another ``CatalogError`` or a Kubernetes API
    error fails only that case, with its reason (an API error never ends certify in a traceback)."""
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
            first = exc.__context__
            if isinstance(first, CASE_ERRORS) and not isinstance(first, CaseNotRun):
                # a cleanup that cannot run here (clearing a fault on a real node) after the case
                # had already failed: the failure is the result
                res.result = "failed"
                res.reason = _reason(exc)
            else:
                res.result = "skipped"
                # the first reason when a cleanup could not run either (clearing a fault never injected)
                res.reason = f"not run: {first if isinstance(first, CaseNotRun) else exc}"
        except CASE_ERRORS as exc:
            res.result = "failed"
            res.reason = _reason(exc)
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
