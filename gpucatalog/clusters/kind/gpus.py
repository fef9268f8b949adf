"""GPU capacity for the workers of a kind cluster.

Called by :mod:`.cluster` once ``kind create cluster`` has finished. Two ways, chosen by what
this machine has:

- ``fake-gpu-operator``: run-ai's chart (as KAI's own e2e installs it), taken like any remote
  chart from the offline chart cache and only when its sha256 equals the digest pinned below.
  Its device plugin registers ``nvidia.com/gpu`` through the kubelet, its status exporter labels
  the nodes (``run.ai/fake.gpu=true``, which switches KAI's binder to fake-GPU reservation pods).
- ``node-patch``: ``nvidia.com/gpu`` written into each GPU worker's status capacity and
  allocatable (Kubernetes' documented way to advertise an extended resource). The scheduler and
  KAI see the same capacity and labels; no device plugin runs, so nothing is allocated on the
  node and KAI's GPU-sharing reservation pods get no GPU index. The RuntimeClass ``nvidia``
  (handler ``runc``) that fake-gpu-operator would create is created too, so pods KAI gives that
  runtime class still start.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpucatalog.catalog import charts
from gpucatalog.clusters import shapes
from gpucatalog.clusters.kind import config
from gpucatalog.core import errors, executor

FGO_URL = "oci://ghcr.io/run-ai/fake-gpu-operator/fake-gpu-operator"
FGO_VERSION = "0.2.0"
# sha256 of the chart archive (the OCI chart layer). Not recorded yet: no machine of this project
# has reached that registry, and the digest is not published anywhere we could read it. Until it
# is set here, the cached archive is never trusted and the node-patch way is used.
FGO_DIGEST: str | None = None
FGO_NAMESPACE = "gpu-operator"
FGO_RELEASE = "gpu-operator"
# KAI's binder puts its GPU reservation pods here; fake-gpu-operator's status updater patches them.
RESERVATION_NAMESPACE = "kai-resource-reservation"


@dataclass(frozen=True)
class Plan:
    mode: str  # "fake-gpu-operator" or "node-patch"
    chart: Path | None
    why: str  # why this mode was chosen, for logs and evidence


def fgo_archive() -> Path:
    return charts.cache_dir() / f"fake-gpu-operator-{FGO_VERSION}.tgz"


def plan(digest: str | None = FGO_DIGEST) -> Plan:
    """Which way GPU capacity is provided, given the pinned ``digest`` and the chart cache."""
    tgz = fgo_archive()
    if digest is None:
        return Plan("node-patch", None, f"fake-gpu-operator {FGO_VERSION}: no chart digest pinned")
    if not tgz.is_file():
        return Plan("node-patch", None, f"fake-gpu-operator {FGO_VERSION} is not in the offline chart cache ({tgz})")
    actual = charts.sha256_file(tgz)
    if actual != digest:
        raise errors.InputError(f"chart digest mismatch for {tgz.name}: pinned {digest}, cache has {actual}",
                                field="fake-gpu-operator", expected=digest)
    return Plan("fake-gpu-operator", tgz, f"fake-gpu-operator {FGO_VERSION} {digest}")


def fgo_values(shape: shapes.Shape) -> dict[str, Any]:
    """fake-gpu-operator values giving every worker of the default pool the shape's GPUs."""
    if shape.gpu is None:
        raise errors.InputError(f"shape {shape.name} has no GPUs", field="--shape")
    return {
        "topology": {
            "nodePoolLabelKey": config.POOL_LABEL,
            "nodePools": {config.POOL: {
                "gpuProduct": shape.gpu.product,
                "gpuCount": shape.gpu.count,
                "gpuMemory": shape.gpu.memory_mib,
            }},
        },
        "environment": {"resourceReservationNamespace": RESERVATION_NAMESPACE},
        # the kind config already labels the workers (as KAI's e2e does)
        "statusUpdater": {"disableNodeLabeling": True},
    }


def install_fgo(helm: Path, kubeconfig: Path, chart: Path, shape: shapes.Shape, state: Path,
                timeout: float = 300.0) -> None:
    values = state / "fake-gpu-operator-values.yaml"
    values.write_text(yaml.safe_dump(fgo_values(shape), sort_keys=False))
    executor.run(
        [helm, "upgrade", "--install", FGO_RELEASE, chart, "--namespace", FGO_NAMESPACE, "--create-namespace",
         "--values", values, "--kubeconfig", kubeconfig, "--wait", "--timeout", f"{int(timeout)}s"],
        timeout=timeout + 60,
    )


def capacity_patch(shape: shapes.Shape) -> dict[str, Any]:
    """The node-status patch advertising the shape's GPUs."""
    if shape.gpu is None:
        raise errors.InputError(f"shape {shape.name} has no GPUs", field="--shape")
    gpus = {"nvidia.com/gpu": str(shape.gpu.count)}
    return {"status": {"capacity": gpus, "allocatable": gpus}}


RUNTIME_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"},
                 "handler": "runc"}


def patch_nodes(api: Any, shape: shapes.Shape) -> list[str]:
    """Patch every worker labelled with ``shape`` and add the ``nvidia`` RuntimeClass; returns the
    node names patched. ``api`` is a kubernetes ``ApiClient``."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    # Typed as Any: the client's generated models mark every field Optional.
    core: Any = client.CoreV1Api(api)
    node_api: Any = client.NodeV1Api(api)
    body = capacity_patch(shape)
    selector = f"{config.SHAPE_LABEL}={shape.name}"
    names: list[str] = [n.metadata.name for n in core.list_node(label_selector=selector).items]
    for name in names:
        core.patch_node_status(name, body)
    try:
        node_api.create_runtime_class(RUNTIME_CLASS)
    except ApiException as exc:
        if exc.status != 409:  # already there is fine
            raise
    return names

