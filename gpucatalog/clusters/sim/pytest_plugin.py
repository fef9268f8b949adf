"""pytest fixtures for integration tests against the sim cluster.

Enable with ``pytest_plugins = ["gpucatalog.clusters.sim.pytest_plugin"]`` in the
root ``conftest.py``. Fixtures:

``sim_cluster``      session-scoped ``SimCluster`` with 8 ``h100-80gb-x8`` nodes (one cluster per
                     test run; node status heartbeat every 3 s so heartbeat effects show quickly)
``sim_kubeconfig``   its admin kubeconfig ``Path``
``k8s_client``       a ``kubernetes.client.ApiClient`` for it
``sim_namespace``    a fresh namespace per test (deleted afterwards), its name

Environment: ``GPU_CATALOG_SIM_NAME`` (cluster name; default ``pt-<pid>``, so concurrent test
runs on one machine never share or stop each other's cluster; clusters of earlier ``pt-<pid>``
runs whose process is gone are removed at start); ``GPU_CATALOG_KEEP_CLUSTER=1`` reuses a running
cluster of that name and leaves it running.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.clusters.sim.cluster import SimCluster, list_clusters

NODES = 8
SHAPE = "h100-80gb-x8"


def _keep() -> bool:
    return os.environ.get("GPU_CATALOG_KEEP_CLUSTER", "") not in ("", "0")


def _remove_abandoned() -> None:
    """Clusters of earlier test runs that died without teardown (a killed pytest)."""
    for name in list_clusters():
        prefix, _, pid = name.partition("-")
        if prefix == "pt" and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            SimCluster(name).down()


@pytest.fixture(scope="session")
def sim_cluster() -> Iterator[SimCluster]:
    _remove_abandoned()
    cluster = SimCluster(os.environ.get("GPU_CATALOG_SIM_NAME", f"pt-{os.getpid()}"))
    if not (_keep() and cluster.running()):
        cluster.up(NODES, SHAPE, heartbeat_s=3.0)
    try:
        yield cluster
    finally:
        if not _keep():
            cluster.down()


@pytest.fixture(scope="session")
def sim_kubeconfig(sim_cluster: SimCluster) -> Path:
    return sim_cluster.kubeconfig()


@pytest.fixture(scope="session")
def k8s_client(sim_cluster: SimCluster) -> Any:
    return sim_cluster.api_client()


@pytest.fixture()
def sim_namespace(k8s_client: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    from kubernetes import client

    core: Any = client.CoreV1Api(k8s_client)
    base = request.node.name.lower().replace("_", "-")[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    core.create_namespace({"metadata": {"name": name}})
    # pods are refused until the controller manager has made the namespace's default
    # ServiceAccount (seconds on a loaded machine): wait for it, as kubectl users learn to
    deadline = time.monotonic() + 60
    while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {name}: no default ServiceAccount after 60 s")
        time.sleep(0.2)
    try:
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")
