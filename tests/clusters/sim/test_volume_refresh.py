"""The sim kubelet refreshes Secret volumes of running pods, as a kubelet does: a webhook server
whose Secret is filled only after its pod started (Kueue's own certificate rotation works so)
ends up serving with it, without the pod being recreated."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from kubernetes import client

from gpucatalog.clusters.sim import SimCluster
from tests.clusters.sim.test_integration import _serving_cert
from tests.clusters.sim.waiting import wait

pytestmark = pytest.mark.integration


def test_secret_filled_after_pod_start_reaches_the_running_pod(sim_cluster: SimCluster, k8s_client: Any,
                                                                sim_namespace: str) -> None:
    ns = sim_namespace
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_secret(ns, {"metadata": {"name": "late-tls"}, "type": "Opaque"})
    core.create_namespaced_pod(ns, {"metadata": {"name": "late", "labels": {"app": "late"}}, "spec": {
        "automountServiceAccountToken": False,
        "containers": [{"name": "main", "image": "ghcr.io/gpu-catalog/demo-webhook:0.1", "args": ["--port", "8443"],
                        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": True}]}],
        "volumes": [{"name": "tls", "secret": {"secretName": "late-tls"}}]}})

    def restarts() -> int:
        st = core.read_namespaced_pod("late", ns).status.container_statuses or []
        return st[0].restart_count if st else 0

    wait("the webhook to fail without its certificate", lambda: restarts() >= 1, timeout=60)
    uid = core.read_namespaced_pod("late", ns).metadata.uid
    crt, key = _serving_cert(f"late.{ns}.svc")
    core.patch_namespaced_secret("late-tls", ns, {"data": {"tls.crt": base64.b64encode(crt).decode(),
                                                           "tls.key": base64.b64encode(key).decode()}})
    node = core.read_namespaced_pod("late", ns).spec.node_name
    mounted = sim_cluster.layout.node_dir(node) / "pods" / f"{ns}_late" / "volumes" / "tls" / "tls.crt"
    wait("the Secret's new key in the pod's volume", lambda: mounted.is_file() and mounted.read_bytes() == crt,
         timeout=30)

    log = mounted.parents[2] / "main.log"
    # the next restart of the same pod (no re-creation) reads the certificate and serves
    wait("the webhook to serve with the late certificate",
         lambda: log.is_file() and "demo webhook on https://" in log.read_text(errors="replace"), timeout=90)
    assert core.read_namespaced_pod("late", ns).metadata.uid == uid
