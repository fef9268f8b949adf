"""Suite plumbing that let cases pass or crash without testing their claim (issue 14, item 11):
an API error ends one case (not certify, in a traceback); a cleanup wait failing inside
``finally`` no longer hides the real reason; a case not run makes the suite incomplete. The
``fault_remediation`` items of the same issue are in ``remediation/test_case_claims.py``."""

from __future__ import annotations

from pathlib import Path

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from gpucatalog.validators.conformance.kit import base


def _run(*cases: tuple[str, base.Case]) -> base.SuiteResult:
    return base.run_cases("s", base.SuiteContext(kubeconfig=Path("/dev/null")), list(cases))


def test_api_errors_fail_one_case_not_the_run() -> None:
    def api(_c: base.SuiteContext, _r: base.CaseResult) -> None:
        raise ApiException(status=403, reason="Forbidden")

    def unreachable(_c: base.SuiteContext, _r: base.CaseResult) -> None:
        raise MaxRetryError(None, "/api/v1/nodes", "connection refused")  # type: ignore[arg-type]

    result = _run(("api", api), ("unreachable", unreachable), ("ok", lambda _c, _r: None))
    assert [c.result for c in result.cases] == ["failed", "failed", "passed"]
    assert "403" in result.cases[0].reason and "connection refused" in result.cases[1].reason
    assert result.result == "failed"


def test_cleanup_failure_does_not_hide_the_real_reason() -> None:
    def case(_c: base.SuiteContext, _r: base.CaseResult) -> None:
        try:
            raise base.CaseFailed("pod evicted although its PodDisruptionBudget allowed no disruption")
        finally:
            raise base.WaitTimeout("timed out after 180s waiting for node-3: back in service")

    reason = _run(("c", case)).cases[0].reason
    # Before: only the cleanup's timeout was reported.
    assert reason.startswith("pod evicted although") and "then, while cleaning up: timed out" in reason


def test_case_not_run_makes_the_suite_incomplete() -> None:
    def not_run(_c: base.SuiteContext, _r: base.CaseResult) -> None:
        raise base.CaseNotRun("no fault injection on this cluster")

    result = _run(("ok", lambda _c, _r: None), ("faults", not_run))
    assert result.cases[1].result == "skipped" and result.result == "incomplete"


def test_a_cleanup_that_cannot_run_does_not_turn_a_failure_into_not_run() -> None:
    """The pod injector cannot clear a synthetic XID on a real node (CaseNotRun) in a case's
    ``finally``: when the case had already failed, it stays failed with its own reason."""
    def case(_c: base.SuiteContext, _r: base.CaseResult) -> None:
        try:
            raise base.WaitTimeout("timed out after 60s waiting for gpu-3: GpuXidError=True naming XID 79")
        finally:
            raise base.CaseNotRun("gpu-3: the synthetic XID cannot be cleared without the node's repair")

    def only_cleanup(_c: base.SuiteContext, _r: base.CaseResult) -> None:
        raise base.CaseNotRun("gpu-3: the synthetic XID cannot be cleared without the node's repair")

    failed, skipped = _run(("c", case), ("d", only_cleanup)).cases
    assert failed.result == "failed" and failed.reason.startswith("timed out after 60s waiting for gpu-3")
    assert "then, while cleaning up: gpu-3: the synthetic XID cannot be cleared" in failed.reason
    assert skipped.result == "skipped" and skipped.reason.startswith("not run: gpu-3")
