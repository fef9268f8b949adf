"""The Kueue adapter against a real kube-apiserver without Kueue: the stack is picked from the
installed bundle, and both queueing suites fail at their preflight in seconds, naming every
missing piece, with every case reported as not run."""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucatalog.core import errors
from gpucatalog.validators.conformance import SUITES
from gpucatalog.validators.conformance.kit import base
from gpucatalog.validators.conformance.queueing_suites import adapters as queueing_adapters
from tests.validators.conformance.apiserver import api_server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with api_server(tmp_path_factory.mktemp("apiserver")) as kc:
        yield kc


def test_stack_follows_the_bundle(tmp_path: Path) -> None:
    def ctx(**params: object) -> base.SuiteContext:
        return base.SuiteContext(kubeconfig=tmp_path / "kc", params=dict(params))

    assert queueing_adapters.stack_of(ctx()) == "kai"
    assert queueing_adapters.stack_of(ctx(bundle_values={"kai-scheduler": {}, "team-queues": {}})) == "kai"
    assert queueing_adapters.stack_of(ctx(bundle_values={"kueue": {}, "team-queues": {"stack": "kueue"}})) == "kueue"
    assert queueing_adapters.stack_of(ctx(stack="kueue")) == "kueue"
    with pytest.raises(errors.InputError, match="unknown scheduling stack 'volcano'"):
        queueing_adapters.stack_of(ctx(stack="volcano"))


@pytest.mark.parametrize("name", ["gang", "quota_reclaim"])
def test_kueue_suite_fails_fast_naming_what_is_missing(kubeconfig: Path, name: str) -> None:
    ctx = base.SuiteContext(kubeconfig=kubeconfig, params={"bundle_values": {"kueue": {}}})
    t0 = time.monotonic()
    result = importlib.import_module(SUITES[name]).run(ctx)
    assert time.monotonic() - t0 < 15
    pre, *rest = result.cases
    assert pre.name == "preflight" and pre.result == "failed" and pre.details["stack"] == "kueue"
    assert "Deployment kueue-system/kueue-controller-manager does not exist (is Kueue installed?)" in pre.reason
    assert "clusterqueues.kueue.x-k8s.io/v1beta2 is not served" in pre.reason
    assert "PriorityClass train does not exist" in pre.reason and "found 0" in pre.reason
    assert rest and all(c.result == "skipped" and "preflight failed" in c.reason for c in rest)
