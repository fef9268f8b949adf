"""The KAI upgrade work set against a real API server: a stand-in for KAI's scheduler
(``fake_kai``, told when to bind and when to hold back) plays the part KAI plays in a cluster,
the test plays the kubelet (bound pods are marked Running) and Helm (the new Queue specs are
applied). What the set starts, what it checks, and what makes each check fail."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gpucatalog.catalog import loader, render
from gpucatalog.validators.conformance.kai import params as kai_params
from gpucatalog.validators.conformance.kai import pods as kai_pods
from gpucatalog.validators.conformance.kit import base, kube_client
from gpucatalog.validators.conformance.upgrade import kai as upgrade_kai
from tests.validators.conformance import fake_kai

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[4]
GPU = "nvidia.com/gpu"


def _queue(name: str, quota: int, parent: str = "", role: str = "team", preemptible: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": {"gpu": {"quota": quota, "limit": -1, "overQuotaWeight": 1},
                                          "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
                                          "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1}}}
    if parent:
        spec["parentQueue"] = parent
    labels = {"gpu-catalog.dev/queue-role": role}
    if role == "team":
        labels["gpu-catalog.dev/default-preemptibility"] = "preemptible" if preemptible else "non-preemptible"
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name, "labels": labels},
            "spec": spec}


def _tree(tag: str, language: int) -> list[dict[str, Any]]:
    """Two departments as team-queues renders them; ``language`` is the team whose quota moves."""
    return [_queue(f"{tag}-research", 8 + language, role="department"),
            _queue(f"{tag}-vision", 4, f"{tag}-research"), _queue(f"{tag}-language", language, f"{tag}-research"),
            _queue(f"{tag}-production", 8, role="department"),
            _queue(f"{tag}-serving", 8, f"{tag}-production", preemptible=False)]


# -- the plan, on the shipped bundle -----------------------------------------------------------------
@pytest.mark.toolchain
def test_the_plan_for_gpu_scheduling_0_1_0_to_0_2_0() -> None:
    cat = loader.load_catalog(REPO / "catalog")
    old, new = (render.render_bundle(cat, f"gpu-scheduling@{v}", "sim") for v in ("0.1.0", "0.2.0"))
    p = upgrade_kai.plan([o for c in old.components for o in c.objects], [o for c in new.components for o in c.objects])
    assert [(t.name, n, pre) for t, n, pre in p.pods] == [
        ("vision", "upgrade-train-0", True), ("vision", "upgrade-train-1", True),
        ("serving", "upgrade-serve-0", False), ("serving", "upgrade-serve-1", False)]
    assert p.gang is not None and (p.gang[0].name, p.gang[2]) == ("language", 4)
    # 0.2.0 moves language's quota 4 -> 5: a non-preemptible pod of 5 GPUs waits on 0.1.0 only
    assert p.pending is not None and (p.pending[0].name, p.pending[2]) == ("language", 5)


def test_without_a_raised_quota_there_is_no_pending_pod_and_too_few_teams_is_refused() -> None:
    same = _tree("t", 4)
    p = upgrade_kai.plan(same, same)
    assert p.pending is None and "raises no team's GPU quota" in p.no_pending
    # the new quota would not leave room for it above the team either
    tight = _tree("t", 5)
    tight[0]["spec"]["resources"]["gpu"]["quota"] = 4
    assert upgrade_kai.plan(same, tight).pending is None
    with pytest.raises(base.CaseFailed, match="1 preemptible and 1 non-preemptible KAI teams"):
        upgrade_kai.plan([q for q in same if not q["metadata"]["name"].endswith("-vision")], same)


# -- the work set on an API server ---------------------------------------------------------------------
class Cluster:
    """A bare API server with GPU nodes, a kubelet stand-in and the test's own Queues."""

    def __init__(self, kubeconfig: Path) -> None:
        self.tag = f"u{secrets.token_hex(2)}"
        self.kube = kube_client.Kube(str(kubeconfig))
        self.kubeconfig = kubeconfig
        self.nodes = [f"gpu-{self.tag}-{i}" for i in range(4)]
        for n in self.nodes:
            fake_kai.gpu_node(self.kube, n, 8)
        self.rr_ns = f"rr-{self.tag}"
        self.work_ns, self.probe_ns = f"upgrade-work-{self.tag}", f"upgrade-probe-{self.tag}"
        fake_kai.namespace(self.kube, self.rr_ns)
        self.queues: list[str] = []
        self.stop = threading.Event()
        self.kubelet = threading.Thread(target=self._kubelet, daemon=True)
        self.kubelet.start()

    def _kubelet(self) -> None:
        kube = kube_client.Kube(str(self.kubeconfig))
        while not self.stop.is_set():
            for ns in (self.work_ns, self.probe_ns):
                try:
                    pods = kube.core.list_namespaced_pod(ns).items
                except Exception:  # noqa: BLE001 - the namespace comes and goes
                    continue
                for p in pods:
                    if p.spec.node_name and (p.status.phase or "Pending") == "Pending":
                        try:
                            fake_kai.pod_status(kube, ns, p.metadata.name, ready=True, restarts=0)
                        except Exception:  # noqa: BLE001 - deleted meanwhile (a probe)
                            continue
            self.stop.wait(0.2)
        kube.close()

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """What Helm does with the team Queues of a version (create or replace each spec)."""
        for o in objects:
            name = o["metadata"]["name"]
            try:
                live = self.kube.custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", name)
                live["spec"] = o["spec"]
                self.kube.custom.replace_cluster_custom_object("scheduling.run.ai", "v2", "queues", name, live)
            except Exception:  # noqa: BLE001 - not there yet
                self.kube.custom.create_cluster_custom_object("scheduling.run.ai", "v2", "queues", o)
                self.queues.append(name)

    def close(self) -> None:
        self.stop.set()
        self.kubelet.join(5)
        for name in reversed(self.queues):
            try:
                self.kube.custom.delete_cluster_custom_object("scheduling.run.ai", "v2", "queues", name)
            except Exception:  # noqa: BLE001 - gone already
                pass
        for n in self.nodes:
            self.kube.core.delete_node(n)
        self.kube.close()


@pytest.fixture
def cluster(kubeconfig: Path) -> Iterator[Cluster]:
    c = Cluster(kubeconfig)
    yield c
    c.close()


def _within_quota(c: Cluster) -> fake_kai.Policy:
    """KAI's rule that matters here: a non-preemptible pod must fit its queue's GPU quota
    (counting the non-preemptible pods bound there); everything else binds to a node with room."""
    kube = c.kube

    def decide(pod: Any, pods: list[Any]) -> fake_kai.Decision:
        queue = pod.metadata.labels[kai_params.Params().queue_label_key]
        gpus = int((pod.spec.containers[0].resources.limits or {}).get(GPU, "0"))
        if pod.spec.priority_class_name == "inference":
            q = kube.custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", queue)
            used = sum(int((x.spec.containers[0].resources.limits or {}).get(GPU, "0")) for x in pods
                       if x.spec.node_name and x.spec.priority_class_name == "inference"
                       and x.metadata.labels.get(kai_params.Params().queue_label_key) == queue)
            if used + gpus > int(q["spec"]["resources"]["gpu"]["quota"]):
                return fake_kai.Reject(f"NonPreemptibleOverQuota: queue {queue} quota")
        load: dict[str, int] = {}
        for x in pods:
            if x.spec.node_name and x.metadata.deletion_timestamp is None:
                load[x.spec.node_name] = load.get(x.spec.node_name, 0) + int(
                    (x.spec.containers[0].resources.limits or {}).get(GPU, "0"))
        free = [n for n in c.nodes if 8 - load.get(n, 0) >= gpus]
        return fake_kai.Bind(free[0]) if free else fake_kai.Reject("no node with room")
    return decide


def _work(c: Cluster, old: list[dict[str, Any]], new: list[dict[str, Any]]) -> upgrade_kai.KaiWork:
    params = kai_params.Params(wait_seconds=20, reservation_namespace=c.rr_ns)
    return upgrade_kai.KaiWork(c.kube, upgrade_kai.plan(old, new), params, namespace=c.work_ns)


@contextmanager
def _started(c: Cluster) -> Iterator[tuple[upgrade_kai.KaiWork, upgrade_kai.KaiProber, list[dict[str, Any]],
                                            list[dict[str, Any]]]]:
    """OLD's Queues applied, KAI's stand-in running, the probe queue made and the work started;
    everything removed afterwards. Yields (work, prober, old Queues, new Queues)."""
    old, new = _tree(c.tag, 4), _tree(c.tag, 5)
    c.apply(old)
    work = _work(c, old, new)
    prober = upgrade_kai.KaiProber(c.kubeconfig, work.p, name=c.probe_ns)
    with fake_kai.running(c.kube, _within_quota(c), reservation_ns=c.rr_ns, retry=True):
        try:
            prober.create_queue()
            work.start()
            yield work, prober, old, new
        finally:
            work.cleanup()
            prober.cleanup()


def test_an_upgrade_that_keeps_everything_passes_and_admits_the_pending_pod(cluster: Cluster) -> None:
    with _started(cluster) as (work, prober, old, new):
        assert work.describe()["pending"].endswith("5 GPUs, inference: over the old quota of 4)")
        assert not work.pending_admitted()
        assert prober.baseline() < 10
        before = work.snapshot()
        assert before[1] >= {f"Queue {cluster.tag}-vision", f"Queue {cluster.tag}-research",
                             f"Queue {cluster.tag}-serving", f"Queue {cluster.tag}-production"}
        cluster.apply(new)
        base.wait_for("the pending pod to run", work.pending_admitted, 20)
        assert work.compare(before, work.snapshot(), new, old, "new") == ([], [])


@pytest.mark.parametrize("harm, says", [
    ("evict", "running pod {ns}/upgrade-gang-0 is gone after the upgrade to new"),
    ("requeue", "pod {ns}/upgrade-train-0 was replaced"),
    ("rename", "Queue {tag}-vision did not survive the upgrade to new (not in its rendering) while running pods "
               "stood in it"),
    ("respec", "Queue {probes} (not new's own) changed spec"),
])
def test_each_loss_an_upgrade_can_cause_fails_it(cluster: Cluster, harm: str, says: str) -> None:
    with _started(cluster) as (work, _prober, old, new):
        before = work.snapshot()
        kube, ns = cluster.kube, cluster.work_ns
        if harm == "evict":  # the new scheduler preempts a gang member
            kube.core.delete_namespaced_pod("upgrade-gang-0", ns, grace_period_seconds=0)
        elif harm == "requeue":  # a pod deleted and submitted again
            kube.core.delete_namespaced_pod("upgrade-train-0", ns, grace_period_seconds=0)
            base.wait_for("gone", lambda: not kube.exists("get", kube.core.read_namespaced_pod, "upgrade-train-0", ns), 10)
            team = work.plan.pods[0][0]
            kube.core.create_namespaced_pod(ns, kai_pods.pod(work.p, "upgrade-train-0", team.name,
                                                             group="upgrade-train-0", gpus=1, priority_class="train"))
            base.wait_for("running again", lambda: work._running("upgrade-train-0", 1), 10)
        elif harm == "rename":  # the new version renames a team that has work running
            new = [q for q in new if not q["metadata"]["name"].endswith("-vision")]
            kube.custom.delete_cluster_custom_object("scheduling.run.ai", "v2", "queues", f"{cluster.tag}-vision")
        elif harm == "respec":  # the upgrade touches a queue the user owns
            q = kube.custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", cluster.probe_ns)
            q["spec"]["resources"]["gpu"]["quota"] = 2
            kube.custom.replace_cluster_custom_object("scheduling.run.ai", "v2", "queues", cluster.probe_ns, q)
        cluster.apply(new)
        running, queues = work.compare(before, work.snapshot(), new, old, "new")
        want = says.format(tag=cluster.tag, ns=ns, probes=cluster.probe_ns)
        assert any(want in p for p in running + queues), running + queues


def test_a_new_version_that_does_not_raise_the_quota_never_admits_the_pending_pod(cluster: Cluster) -> None:
    with _started(cluster) as (work, _prober, old, _new):
        cluster.apply(old)  # the "new" version kept the old quota
        with pytest.raises(base.WaitTimeout):
            base.wait_for("the pending pod to run", work.pending_admitted, 5)
        work.release_running()  # even with the running work gone, the quota holds it back
        with pytest.raises(base.WaitTimeout):
            base.wait_for("the pending pod to run", work.pending_admitted, 3)
