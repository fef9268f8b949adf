"""The queueing contract's own plumbing (no cluster): the tree it builds, and a case an adapter
cannot express is reported as not applicable, shown as such and never counted as passed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.queueing import contract as queueing_contract
from gpucatalog.validators.conformance.queueing.contract import Dept, Team


def test_tree_walks_parents_first() -> None:
    tree = Dept("root", 8, (Dept("d1", 4, (Team("a", 4),)), Team("b", 4, preemptible=False)))
    assert [(n.name, p.name if p else None) for n, p in tree.walk()] == [
        ("root", None), ("d1", "root"), ("b", "root"), ("a", "d1")]


class _NoWeights:
    """An adapter for a stack that cannot weigh teams; its cases must never run here."""

    stack = "fake"
    wait_seconds = settle_seconds = 1.0

    def __init__(self) -> None:
        self.kube: Any = None
        self.closed = False

    def preflight(self, res: base.CaseResult) -> None:
        res.details["ok"] = True

    def begin_case(self) -> None:
        raise AssertionError("an inapplicable case must not wait for the stack")

    def end_case(self) -> None:
        raise AssertionError("an inapplicable case must not check the stack")

    def guard(self) -> None:
        pass

    def not_applicable(self, case: str) -> str:
        return "no fair sharing" if case == "over_quota_weights_split_spare_gpus" else ""

    @contextmanager
    def space(self, suite: str, res: base.CaseResult) -> Iterator[Any]:
        raise AssertionError("an inapplicable case must not touch the cluster")
        yield

    def close(self) -> None:
        self.closed = True


def test_not_applicable_case_is_shown_and_not_passed(tmp_path: Path) -> None:
    adapter = _NoWeights()
    ctx = base.SuiteContext(kubeconfig=tmp_path / "kc")
    result = queueing_contract.run("quota_reclaim", ctx, adapter, ("over_quota_weights_split_spare_gpus",))
    pre, case = result.cases
    assert pre.result == "passed" and pre.details == {"stack": "fake", "ok": True}
    assert case.name == "over_quota_weights_split_spare_gpus" and case.result == "skipped"
    assert case.reason == "not applicable on fake: no fair sharing"
    assert case.details == {"stack": "fake", "not_applicable": True}
    assert adapter.closed
