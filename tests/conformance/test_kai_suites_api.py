"""The KAI CRDs and suites against a real kube-apiserver (no nodes, no KAI): the CRDs are
accepted, strict decoding rejects a wrong Queue field, the suites' workspaces create and remove
real queues, and every suite fails at its preflight in seconds, naming what is missing."""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpucatalog.catalog import executor
from gpucatalog.toolchain import build
from gpucatalog.validators.conformance import SUITES, base, kai_cluster
from tests.conformance.apiserver import api_server

pytestmark = pytest.mark.integration
CRDS = Path(__file__).resolve().parents[2] / "charts/kai-scheduler/crds"


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with api_server(tmp_path_factory.mktemp("apiserver")) as kc:
        kubectl = build.ensure("kubectl")
        executor.run([kubectl, "--kubeconfig", kc, "apply", "--server-side", "-f", CRDS])
        executor.run([kubectl, "--kubeconfig", kc, "wait", "--for=condition=Established", "crd", "--all",
                      "--timeout=60s"])
        yield kc


def kubectl_apply(kc: Path, doc: dict[str, object]) -> str:
    proc = executor.run([build.ensure("kubectl"), "--kubeconfig", kc, "apply", "--validate=strict", "-f", "-"],
                        input=yaml.safe_dump(doc), check=False)
    return proc.stdout + proc.stderr


def test_crds_are_structural_and_strict(kubeconfig: Path) -> None:
    queue = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "strict"},
             "spec": {"resources": {"gpu": {"quota": 1, "overQuotaWeight": 1, "limit": -1}}}}
    assert "created" in kubectl_apply(kubeconfig, queue)
    queue["spec"]["resources"]["gpu"]["quotta"] = 2  # type: ignore[index]
    assert 'unknown field "spec.resources.gpu.quotta"' in kubectl_apply(kubeconfig, queue)


@pytest.mark.parametrize("name", sorted(SUITES))
def test_suite_fails_fast_naming_what_is_missing(kubeconfig: Path, name: str) -> None:
    ctx = base.SuiteContext(kubeconfig=kubeconfig)
    t0 = time.monotonic()
    result = importlib.import_module(SUITES[name]).run(ctx)
    assert time.monotonic() - t0 < 15
    assert result.result == "failed"
    pre, *rest = result.cases
    assert pre.name == "preflight" and pre.result == "failed"
    assert "Deployment kai-scheduler/kai-scheduler-default does not exist" in pre.reason
    assert "Deployment kai-scheduler/binder does not exist" in pre.reason
    assert "0 allocatable nvidia.com/gpu" in pre.reason
    assert rest and all(c.result == "skipped" and "preflight failed" in c.reason for c in rest)


def test_workspace_queues_are_real_and_cleaned_up(kubeconfig: Path) -> None:
    kube = kai_cluster.Kube(str(kubeconfig))
    p = kai_cluster.Params()
    res = base.CaseResult("ws", "passed")
    with kai_cluster.workspace(kube, p, "t", res) as ws:
        root = ws.queue(f"{ws.ns}-root", quota=4)
        ws.queue(f"{ws.ns}-leaf", parent=root, quota=2, weight=2)
        body = kai_cluster.pin(kai_cluster.pod(p, "frac", f"{ws.ns}-leaf", group="g", fraction=0.5), ["n1"])
        ws.create(body)
        (created,) = ws.pods(f"{kai_cluster.SUITE_LABEL}=g")
        assert created.spec.scheduler_name == "kai-scheduler"
        assert created.metadata.annotations["gpu-fraction"] == "0.5"
        assert created.metadata.labels["kai.scheduler/queue"] == f"{ws.ns}-leaf"
        names = {q["metadata"]["name"] for q in kube.custom.list_cluster_custom_object(
            "scheduling.run.ai", "v2", "queues")["items"]}
        assert {f"{ws.ns}-root", f"{ws.ns}-leaf"} <= names
        ns = ws.ns
    names = {q["metadata"]["name"] for q in kube.custom.list_cluster_custom_object(
        "scheduling.run.ai", "v2", "queues")["items"]}
    assert not {n for n in names if n.startswith(ns)}
    assert "cleanup_problems" not in res.details
    kube.close()
