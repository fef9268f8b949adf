"""The kind cluster configuration generated from a worker count and a node shape.

Called by :mod:`.cluster` before ``kind create cluster``. One control-plane node and ``workers``
worker nodes, every node on the pinned node image; each worker carries the labels a GPU node of
the shape would have (product, count, memory) plus the ones fake-gpu-operator selects on, the
same labels KAI's own e2e kind config sets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from gpucatalog.clusters import shapes
from gpucatalog.core import errors

# Pinned by digest as kind's v0.33.0 release notes list it: a tag alone may point at an image
# built for another kind release. Kubernetes 1.36 to match the toolchain's v1.36.3 control plane
# (kind publishes 1.36.4 as the 1.36 image of this release).
NODE_IMAGE = "kindest/node:v1.36.4@sha256:099e049362a1526b2db71494e1947aae99bd16290d7c895f2b7ea312e3cbfaed"

MAX_WORKERS = 16  # each worker is a container running a kubelet and containerd
NAME_PREFIX = "gpucatalog-"  # never touches a kind cluster someone made by hand
# kind derives container and host names from the cluster name ("<name>-worker2").
_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")

# How often kubelet resyncs each pod, and with it how soon a changed Secret shows in a pod's volume
# (1 m by default). Kueue's manager waits for the webhook certificate it writes into a Secret to
# appear in its volume before it reports ready: with the default that took 90-107 s here.
KUBELET_SYNC = "10s"

POOL_LABEL = "run.ai/simulated-gpu-node-pool"  # fake-gpu-operator's nodePoolLabelKey
POOL = "default"
SHAPE_LABEL = "gpu-catalog.dev/shape"
# fake-gpu-operator's device-plugin and status-exporter DaemonSets select on these.
DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
EXPORTER_LABEL = "nvidia.com/gpu.deploy.dcgm-exporter"


def cluster_name(name: str) -> str:
    """The kind cluster name for the provider name ``name`` (exit 2 when kind cannot use it)."""
    if not _NAME_RE.match(name):
        raise errors.InputError(
            f"cluster name {name!r} cannot name a kind cluster", field="--cluster-name",
            expected="1-40 lowercase letters, digits or '-', starting and ending with a letter or digit",
        )
    return NAME_PREFIX + name


def worker_labels(shape: shapes.Shape) -> dict[str, str]:
    """Labels of one worker of ``shape``; a CPU-only shape gets no GPU labels."""
    labels = {SHAPE_LABEL: shape.name}
    if shape.gpu is not None:
        labels.update({
            POOL_LABEL: POOL,
            DEVICE_PLUGIN_LABEL: "true",
            EXPORTER_LABEL: "true",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": shape.gpu.product,
            "nvidia.com/gpu.count": str(shape.gpu.count),
            "nvidia.com/gpu.memory": str(shape.gpu.memory_mib),
        })
    return labels


@dataclass(frozen=True)
class LocalImages:
    """How a node image built here (:mod:`.nodeimage`) names what it preloads: kubeadm is pointed at
    that registry name and those tags, so it never asks for an upstream image it does not have."""

    repository: str
    etcd_tag: str
    coredns_tag: str


def kind_config(workers: int, shape: shapes.Shape, image: str = NODE_IMAGE, *,
                local: LocalImages | None = None, cgroup_v1: bool = False) -> dict[str, Any]:
    """The kind ``Cluster`` document: a control plane and ``workers`` workers of ``shape``.

    ``local``: the node image was built here; kind's default CNI (kindnetd, whose source no
    registry here serves) is left out and the provider wires the pod network itself.
    ``cgroup_v1``: the host runs cgroup v1, which kubelet 1.35+ refuses unless told otherwise."""
    if not 1 <= workers <= MAX_WORKERS:
        raise errors.InputError(f"node count {workers} out of range for kind", field="--nodes",
                                expected=f"1-{MAX_WORKERS} worker nodes")
    nodes: list[dict[str, Any]] = [{"role": "control-plane", "image": image}]
    nodes += [{"role": "worker", "image": image, "labels": worker_labels(shape)} for _ in range(workers)]
    doc: dict[str, Any] = {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "nodes": nodes}
    patches: list[str] = []
    if local is not None:
        doc["networking"] = {"disableDefaultCNI": True}
        patches.append(yaml.safe_dump({
            "kind": "ClusterConfiguration", "imageRepository": local.repository,
            "etcd": {"local": {"imageTag": local.etcd_tag}}, "dns": {"imageTag": local.coredns_tag}}))
    kubelet: dict[str, Any] = {"kind": "KubeletConfiguration", "syncFrequency": KUBELET_SYNC}
    if cgroup_v1:
        kubelet["failCgroupV1"] = False
    patches.append(yaml.safe_dump(kubelet))
    doc["kubeadmConfigPatches"] = patches
    return doc


def render(workers: int, shape: shapes.Shape, image: str = NODE_IMAGE, *,
           local: LocalImages | None = None, cgroup_v1: bool = False) -> str:
    return yaml.safe_dump(kind_config(workers, shape, image, local=local, cgroup_v1=cgroup_v1), sort_keys=False)
