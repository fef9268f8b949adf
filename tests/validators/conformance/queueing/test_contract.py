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


class _WeightSpace:
    """Records what the weights case asks for; every submitted unit runs at once."""

    ns = "t"
    partial_gangs = False

    def __init__(self) -> None:
        self.root: Dept | None = None
        self.pinned: set[str] = set()
        self.count: dict[str, int] = {}

    def build(self, root: Dept) -> None:
        self.root = root

    def submit(self, team: str, group: str, count: int, nodes: list[str], *, start: int = 0,
               preemptible: bool = True) -> None:
        self.pinned |= set(nodes)
        self.count[group] = self.count.get(group, 0) + count

    def scheduled(self, group: str) -> list[Any]:
        return [object()] * min(self.count.get(group, 0), {"w1": 6, "w2": 10}[group])


class _Weights(_NoWeights):
    def __init__(self) -> None:
        super().__init__()
        self.sp = _WeightSpace()

    def not_applicable(self, case: str) -> str:
        return ""

    def begin_case(self) -> None:
        pass

    def end_case(self) -> None:
        pass

    @contextmanager
    def space(self, suite: str, res: base.CaseResult) -> Iterator[Any]:
        yield self.sp


def test_weights_case_takes_whole_idle_nodes_up_to_its_cap(tmp_path: Path, monkeypatch: Any) -> None:
    # three 8-GPU nodes, one of them partly busy: the case splits the two idle ones (16 GPUs) and
    # pins every unit there, so the busy node's work cannot skew the split
    inv = queueing_contract.gpu_inventory
    monkeypatch.setattr(inv, "gpu_capacity", lambda _k: {"n0": 8, "n1": 8, "n2": 8})
    monkeypatch.setattr(inv, "free_gpus", lambda _k: {"n0": 8, "n1": 5, "n2": 8})
    adapter = _Weights()
    ctx = base.SuiteContext(kubeconfig=tmp_path / "kc", params={"max_weight_gpus": 16})
    result = queueing_contract.run("quota_reclaim", ctx, adapter, ("over_quota_weights_split_spare_gpus",))
    case = result.cases[1]
    assert case.result == "passed", case.reason
    assert case.details["nodes"] == ["n0", "n2"] and adapter.sp.pinned == {"n0", "n2"}
    assert adapter.sp.root is not None and adapter.sp.root.quota == 16
    assert case.details["split"] == {"w1": 6, "w2": 10}


def test_weights_case_fails_naming_the_cap_when_no_idle_node_fits(tmp_path: Path, monkeypatch: Any) -> None:
    inv = queueing_contract.gpu_inventory
    monkeypatch.setattr(inv, "gpu_capacity", lambda _k: {"n0": 8, "n1": 8})
    monkeypatch.setattr(inv, "free_gpus", lambda _k: {"n0": 8, "n1": 2})
    ctx = base.SuiteContext(kubeconfig=tmp_path / "kc", params={"max_weight_gpus": 4})
    result = queueing_contract.run("quota_reclaim", ctx, _Weights(), ("over_quota_weights_split_spare_gpus",))
    case = result.cases[1]
    assert case.result == "failed" and "runs on 3..4" in case.reason and "1 of 2 nodes idle" in case.reason
