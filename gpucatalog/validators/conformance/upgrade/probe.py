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
from typing import Any, ClassVar

import urllib3
from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client
from gpucatalog.validators.conformance.kueue import space as kueue_space

NAME = "upgrade-probe"
LABEL = "gpu-catalog.dev/upgrade-probe"


@dataclass
class Probe:
    started: float  # monotonic
    waited: float | None = None  # None: never scheduled before the probe gave up
    aborted: bool = False  # the prober stopped while it waited: not a measurement


@dataclass
class Prober:
    """One probe at a time on a thread; subclasses say how a probe is submitted, seen scheduled
    and removed (``KueueProber``; ``upgrade_slurm.SlurmProber``). API errors while the control
    plane is busy count as waiting, not as failures."""

    give_up_s: float = 300.0
    probes: list[Probe] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _next: int = 0

    TRANSIENT: ClassVar[tuple[type[BaseException], ...]] = (ApiException, urllib3.exceptions.HTTPError)

    def create_queue(self) -> None:
        """Make what the probes are submitted to (nothing by default)."""

    def cleanup(self) -> None:
        """Remove what ``create_queue`` made (nothing by default)."""

    def submit(self, i: int) -> None:
        raise NotImplementedError

    def scheduled(self, i: int) -> bool:
        raise NotImplementedError

    def remove(self, i: int) -> None:
        raise NotImplementedError

    def one(self, i: int) -> Probe:
        """Submit probe ``i`` and wait until it is scheduled (or the probe gives up)."""
        probe = Probe(time.monotonic())
        submitted = False
        while time.monotonic() - probe.started < self.give_up_s and not self._stop.is_set():
            try:
                if not submitted:
                    self.submit(i)
                    submitted = True
                if self.scheduled(i):
                    probe.waited = time.monotonic() - probe.started
                    break
            except self.TRANSIENT as exc:
                if len(self.errors) < 20:
                    self.errors.append(f"probe-{i}: {str(exc).splitlines()[0][:160]}")
            time.sleep(0.2)
        probe.aborted = probe.waited is None and self._stop.is_set()
        try:
            self.remove(i)
        except self.TRANSIENT:
            pass  # what is left goes with the probe's queue at the end
        return probe

    def baseline(self, count: int = 3) -> float:
        waits = []
        for i in range(count):
            p = self.one(1000 + i)
            if p.waited is None:
                raise base.CaseFailed(f"a probe was not scheduled within {self.give_up_s:.0f}s before the upgrade")
            waits.append(p.waited)
        return float(statistics.median(waits))

    def start(self) -> None:
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                # names never repeat: an aborted probe's Job may still be going away
                self._next += 1
                probe = self.one(self._next)
                if not probe.aborted:
                    self.probes.append(probe)

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


class ApiProber(Prober):
    """A prober that talks to the Kubernetes API: one client per thread, so the probe thread's
    calls never share a connection pool with the checks'."""

    def __init__(self, kubeconfig: Path) -> None:
        super().__init__()
        self.kubeconfig = kubeconfig
        self._local = threading.local()

    @property
    def kube(self) -> kube_client.Kube:
        k = getattr(self._local, "kube", None)
        if k is None:
            k = self._local.kube = kube_client.Kube(self.kubeconfig)
        return k  # type: ignore[no-any-return]


class KueueProber(ApiProber):
    def __init__(self, kubeconfig: Path, flavor: str, params: kueue_space.KueueParams) -> None:
        super().__init__(kubeconfig)
        self.flavor, self.params = flavor, params

    def submit(self, i: int) -> None:
        self.kube.batch.create_namespaced_job(NAME, self._job(i))

    def scheduled(self, i: int) -> bool:
        pods = self.kube.core.list_namespaced_pod(NAME, label_selector=f"{LABEL}=probe-{i}").items
        return any(p.spec.node_name for p in pods)

    def remove(self, i: int) -> None:
        self.kube.batch.delete_namespaced_job(f"probe-{i}", NAME, propagation_policy="Background")
        self.kube.core.delete_collection_namespaced_pod(NAME, label_selector=f"{LABEL}=probe-{i}", grace_period_seconds=0)

    def create_queue(self) -> None:
        kube = self.kube
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

    def cleanup(self) -> None:
        kube = self.kube
        for fn, args in ((kube.core.delete_namespace, (NAME,)),
                         (kube.custom.delete_cluster_custom_object,
                          (kueue_space.GROUP, kueue_space.VERSION, "clusterqueues", NAME))):
            try:
                fn(*args)
            except (ApiException, urllib3.exceptions.HTTPError):
                pass  # best effort: the cluster is torn down after certification
