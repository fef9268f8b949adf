"""The scheduling gap of an upgrade: how long new work waited to be scheduled while it ran.

A probe is a one-pod, one-GPU Job in a ClusterQueue of its own (``upgrade-probe``, outside every
cohort, so it takes nothing from the teams). One probe at a time: submitted, timed until its pod
is bound to a node (Kueue admitted it, kube-scheduler placed it), deleted, and the next one
submitted. Probes run on a thread from before the upgrade until after it; the gap is the
longest wait of a probe that was waiting at any moment of the upgrade, next to the baseline
(the median wait before the upgrade began).

The ClusterQueue, LocalQueue and namespace are also a user's own queue objects that the
bundle does not render: the upgrade must leave them as they were.

Called by ``pipelines.upgrade``. Talks only to the Kubernetes API.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance import base, gpu_inventory, kube_client, kueue_space

NAME = "upgrade-probe"
LABEL = "gpu-catalog.dev/upgrade-probe"


@dataclass
class Probe:
    started: float  # monotonic
    waited: float | None = None  # None: never scheduled before the probe gave up


@dataclass
class Prober:
    kubeconfig: Path
    flavor: str
    params: kueue_space.KueueParams
    give_up_s: float = 300.0
    probes: list[Probe] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def create_queue(self, kube: kube_client.Kube) -> None:
        kube.call(f"create namespace {NAME}", kube.core.create_namespace,
                  {"metadata": {"name": NAME, "labels": {LABEL: "true"}}})
        cq = {"apiVersion": f"{kueue_space.GROUP}/{kueue_space.VERSION}", "kind": "ClusterQueue",
              "metadata": {"name": NAME}, "spec": {
                  "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAME}},
                  "resourceGroups": [{"coveredResources": [gpu_inventory.GPU], "flavors": [
                      {"name": self.flavor, "resources": [{"name": gpu_inventory.GPU, "nominalQuota": 4}]}]}]}}
        kube.call(f"create ClusterQueue {NAME}", kube.custom.create_cluster_custom_object,
                  kueue_space.GROUP, kueue_space.VERSION, "clusterqueues", cq)
        lq = {"apiVersion": f"{kueue_space.GROUP}/{kueue_space.VERSION}", "kind": "LocalQueue",
              "metadata": {"name": NAME, "namespace": NAME}, "spec": {"clusterQueue": NAME}}
        kube.call(f"create LocalQueue {NAME}", kube.custom.create_namespaced_custom_object,
                  kueue_space.GROUP, kueue_space.VERSION, NAME, "localqueues", lq)

    def _job(self, i: int) -> dict[str, Any]:
        pod = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
               "tolerations": [{"key": gpu_inventory.GPU, "operator": "Exists", "effect": "NoSchedule"}],
               "containers": [{"name": "main", "image": self.params.workload_image, "resources": {
                   "requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {gpu_inventory.GPU: "1"}}}]}
        return {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": f"probe-{i}", "labels": {kueue_space.QUEUE_LABEL: NAME}},
                "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "suspend": True,
                         "template": {"metadata": {"labels": {LABEL: f"probe-{i}"},
                                                   "annotations": {kueue_space.RUN_FOR: self.params.run_for}},
                                      "spec": pod}}}

    def _scheduled(self, kube: kube_client.Kube, i: int) -> bool:
        pods = kube.core.list_namespaced_pod(NAME, label_selector=f"{LABEL}=probe-{i}").items
        return any(p.spec.node_name for p in pods)

    def one(self, kube: kube_client.Kube, i: int) -> Probe:
        """Submit probe ``i`` and wait until it is scheduled (or the probe gives up); API errors
        while the control plane is busy count as waiting, not as failures."""
        probe = Probe(time.monotonic())
        submitted = False
        while time.monotonic() - probe.started < self.give_up_s and not self._stop.is_set():
            try:
                if not submitted:
                    kube.batch.create_namespaced_job(NAME, self._job(i))
                    submitted = True
                if self._scheduled(kube, i):
                    probe.waited = time.monotonic() - probe.started
                    break
            except (ApiException, urllib3.exceptions.HTTPError) as exc:
                if len(self.errors) < 20:
                    self.errors.append(f"probe-{i}: {str(exc).splitlines()[0][:160]}")
            time.sleep(0.2)
        try:
            kube.batch.delete_namespaced_job(f"probe-{i}", NAME, propagation_policy="Background")
            kube.core.delete_collection_namespaced_pod(NAME, label_selector=f"{LABEL}=probe-{i}", grace_period_seconds=0)
        except (ApiException, urllib3.exceptions.HTTPError):
            pass  # the namespace goes at the end anyway
        return probe

    def baseline(self, count: int = 3) -> float:
        kube = kube_client.Kube(self.kubeconfig)
        try:
            waits = []
            for i in range(count):
                p = self.one(kube, 1000 + i)
                if p.waited is None:
                    raise base.CaseFailed(f"a probe Job was not scheduled within {self.give_up_s:.0f}s before the upgrade")
                waits.append(p.waited)
            return float(statistics.median(waits))
        finally:
            kube.close()

    def start(self) -> None:
        def loop() -> None:
            kube = kube_client.Kube(self.kubeconfig)
            try:
                i = 0
                while not self._stop.is_set():
                    self.probes.append(self.one(kube, i))
                    i += 1
            finally:
                kube.close()

        self._thread = threading.Thread(target=loop, name="upgrade-probe", daemon=True)
        self._thread.start()

    def stop(self, settle_s: float = 0.0) -> None:
        """Stop after the probe that is waiting now is scheduled (so the gap is measured whole)."""
        time.sleep(settle_s)
        n = len(self.probes)
        deadline = time.monotonic() + self.give_up_s
        while len(self.probes) <= n and time.monotonic() < deadline and self._thread and self._thread.is_alive():
            time.sleep(0.2)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def gap(self, window: tuple[float, float]) -> tuple[float, int, int]:
        """(longest wait of a probe waiting during ``window``, probes in it, probes never scheduled)."""
        lo, hi = window
        inside = [p for p in self.probes if p.started <= hi and p.started + (p.waited or self.give_up_s) >= lo]
        waits = [p.waited if p.waited is not None else self.give_up_s for p in inside]
        return (max(waits) if waits else 0.0), len(inside), sum(1 for p in inside if p.waited is None)

    def cleanup(self, kube: kube_client.Kube) -> None:
        for fn, args in ((kube.core.delete_namespace, (NAME,)),
                         (kube.custom.delete_cluster_custom_object,
                          (kueue_space.GROUP, kueue_space.VERSION, "clusterqueues", NAME))):
            try:
                fn(*args)
            except (ApiException, urllib3.exceptions.HTTPError):
                pass  # best effort: the cluster is torn down after certification
