"""One bare API server (etcd + kube-apiserver, no nodes, no controllers) shared by the
API-backed KAI suite tests, with KAI's CRDs and the team-queues output applied. Tests isolate
themselves by namespace (their own KAI and reservation namespaces) and remove the nodes they make."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucatalog.core import executor
from gpucatalog.toolchain import build
from tests.validators.conformance.apiserver import api_server

CRDS = Path(__file__).resolve().parents[3] / "charts/kai-scheduler/crds"


@pytest.fixture(scope="session")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with api_server(tmp_path_factory.mktemp("apiserver")) as kc:
        kubectl = build.ensure("kubectl")
        executor.run([kubectl, "--kubeconfig", kc, "apply", "--server-side", "-f", CRDS])
        executor.run([kubectl, "--kubeconfig", kc, "wait", "--for=condition=Established", "crd", "--all",
                      "--timeout=60s"])
        # The bundle's team queues and PriorityClasses, rendered by real helm, applied strictly.
        rendered = executor.run([build.ensure("helm"), "template", "tq", CRDS.parents[1] / "team-queues",
                                 "--kube-version", "1.36.3"]).stdout
        executor.run([kubectl, "--kubeconfig", kc, "apply", "--validate=strict", "-f", "-"], input=rendered)
        yield kc
