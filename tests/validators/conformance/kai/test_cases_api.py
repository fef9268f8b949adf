"""KAI suite cases against a real API server, with ``fake_kai`` playing the scheduler and binder:
each test shows a cluster behaviour that the case used to accept and now fails, next to the
behaviour it passes. Every test works in its own KAI and reservation namespaces and removes the
GPU nodes it made."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kai import adapter as kai_adapter
from gpucatalog.validators.conformance.kai import fractional_gpu
from gpucatalog.validators.conformance.kai import params as kai_params
from gpucatalog.validators.conformance.kai import pods as kai_pods
from gpucatalog.validators.conformance.kai import preflight as kai_preflight
from gpucatalog.validators.conformance.kai import suite as kai_suite
from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client
from gpucatalog.validators.conformance.queueing import contract as queueing_contract
from gpucatalog.validators.conformance.queueing.contract import Dept, Team
from tests.validators.conformance import fake_kai

pytestmark = pytest.mark.integration
APPS = sorted(kai_preflight.DEPLOYMENTS.values())


class Env:
    """One test's corner: KAI namespace with ready components, reservation namespace, GPU nodes."""

    def __init__(self, kubeconfig: Path) -> None:
        tag = secrets.token_hex(3)
        self.kai_ns, self.rr_ns = f"kai-{tag}", f"rr-{tag}"
        self.kube = kube_client.Kube(str(kubeconfig))
        self.kubeconfig = kubeconfig
        self.nodes: list[str] = []
        fake_kai.components_ready(self.kube, self.kai_ns, APPS)
        fake_kai.namespace(self.kube, self.rr_ns)
        self.params: dict[str, Any] = {"kai_namespace": self.kai_ns, "reservation_namespace": self.rr_ns,
                                       "wait_seconds": 15, "settle_seconds": 2}

    def node(self, gpus: int, memory_mib: int = 81920) -> str:
        name = f"gpu-{secrets.token_hex(3)}"
        fake_kai.gpu_node(self.kube, name, gpus, memory_mib)
        self.nodes.append(name)
        return name

    def ctx(self, **params: Any) -> base.SuiteContext:
        return base.SuiteContext(kubeconfig=self.kubeconfig, params={**self.params, **params})

    def fake(self, decide: fake_kai.Policy, release_after: float | None = 0.5) -> Any:
        return fake_kai.running(self.kube, decide, reservation_ns=self.rr_ns, release_after=release_after)

    def close(self) -> None:
        for pod in self.kube.core.list_namespaced_pod(self.rr_ns).items:
            self.kube.core.delete_namespaced_pod(pod.metadata.name, self.rr_ns, grace_period_seconds=0)
        for n in self.nodes:
            self.kube.core.delete_node(n)
        self.kube.close()


@pytest.fixture
def env(kubeconfig: Path) -> Iterator[Env]:
    e = Env(kubeconfig)
    yield e
    e.close()


def run_case(suite: Any, case: Any) -> base.CaseResult:
    """One case as the suite runs it (fresh start, watchdog) without the preflight."""
    result = base.run_cases("t", suite.ctx, [("case", suite.guarded(case))])
    return result.cases[0]


def contract_case(ctx: base.SuiteContext, name: str) -> base.CaseResult:
    """One case of the queueing contract as its suite runs it on KAI (fresh start, watchdog)."""
    adapter = kai_adapter.KaiAdapter(ctx)
    c = queueing_contract.Contract(ctx, adapter)
    try:
        return base.run_cases("t", ctx, [c.case(name, getattr(c, name))]).cases[0]
    finally:
        adapter.close()


def make(cls: type, ctx: base.SuiteContext) -> Any:
    suite = cls(ctx)
    suite.ctx = ctx
    suite.watchdog()
    return suite


# -- node pinning --------------------------------------------------------------------------------


def test_pinning_to_several_nodes_is_accepted_by_the_api_server(env: Env) -> None:
    """The old single term with two names was refused: `values: must be only one value`."""
    p = kai_params.Params()
    fake_kai.namespace(env.kube, "pin-test")
    old = kai_pods.pod(p, "old", "q", group="g", gpus=1)
    old["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]}}}
    with pytest.raises(ApiException) as info:
        env.kube.core.create_namespaced_pod("pin-test", old)
    assert info.value.status == 422 and "must be only one value" in str(info.value.body)
    created = env.kube.core.create_namespaced_pod("pin-test", kai_pods.pin(kai_pods.pod(p, "new", "q", group="g", gpus=1),
                                                                           ["a", "b"]))
    terms = created.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert [t.match_fields[0].values for t in terms] == [["a"], ["b"]]
    env.kube.core.delete_namespaced_pod("new", "pin-test", grace_period_seconds=0)
    env.kube.core.delete_namespace("pin-test")


# -- fractional_gpu -------------------------------------------------------------------------------


def test_gpu_memory_that_fits_needs_the_pod_on_a_shared_gpu(env: Env) -> None:
    """A scheduler that binds the gpu-memory pod like any pod (no GPU group, no reservation) used
    to pass the case; now it fails naming the missing GPU group. KAI's behaviour passes."""
    node = env.node(8)
    s = make(fractional_gpu._Suite, env.ctx(wait_seconds=4))
    with env.fake(lambda pod, _all: fake_kai.Bind(node)):
        res = run_case(s, s.gpu_memory_that_fits)
    assert res.result == "failed"
    assert "KAI gave it no GPU group (runai-gpu-group): it does not use a shared GPU" in res.reason

    s = make(fractional_gpu._Suite, env.ctx())
    with env.fake(lambda pod, _all: fake_kai.Bind(node, group="g-mem", device="GPU-1")):
        res = run_case(s, s.gpu_memory_that_fits)
    assert res.result == "passed", res.reason
    assert res.details["gpu_group"] == "g-mem"
    assert res.details["placements"][0]["gpu"] == "g-mem/GPU-1" and res.details["placements"][0]["fraction"] == 0.25


def test_gpu_memory_that_fits_needs_a_reservation_pod_holding_the_gpu(env: Env) -> None:
    node = env.node(8)
    s = make(fractional_gpu._Suite, env.ctx(wait_seconds=3))

    def label_only(pod: Any, _all: list[Any]) -> fake_kai.Decision:
        env.kube.core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                           {"metadata": {"labels": {kai_pods.GPU_GROUP_LABEL: "g-x"}}})
        return fake_kai.Bind(node)

    with env.fake(label_only):
        res = run_case(s, s.gpu_memory_that_fits)
    assert res.result == "failed"
    assert "in GPU group g-x, but no reservation pod of that group holds a GPU" in res.reason


def test_gpu_memory_larger_than_any_gpu_needs_kais_gpu_memory_reason(env: Env) -> None:
    """Pending for another reason (a quota) used to pass; only a GPU-memory reason does now."""
    env.node(8)
    s = make(fractional_gpu._Suite, env.ctx())
    with env.fake(lambda pod, _all: fake_kai.Reject("queue quota exceeded")):
        res = run_case(s, s.gpu_memory_larger_than_any_gpu)
    assert res.result == "failed"
    assert "pending, but not for lack of GPU memory: Unschedulable: queue quota exceeded" in res.reason

    kai_reason = "0/1 nodes are available: 1 node(s) didn't have enough resources: GPU memory."
    with env.fake(lambda pod, _all: fake_kai.Reject(kai_reason)):
        res = run_case(s, s.gpu_memory_larger_than_any_gpu)
    assert res.result == "passed", res.reason


def test_oversubscription_counts_other_tenants_on_the_same_gpu(env: Env) -> None:
    """The case's two halves fill GPU group g1; another tenant's 0.5 pod in g1 makes 1.5 of a
    device. The old check (the case's own placements only) saw 1.0 and passed."""
    node = env.node(8)
    s = make(fractional_gpu._Suite, env.ctx())
    with env.fake(lambda pod, _all: fake_kai.Bind(node, group="g1", device="GPU-0")):
        res = run_case(s, s.two_halves_share_one_gpu)
        assert res.result == "passed", res.reason
        fake_kai.namespace(env.kube, "tenant-x")
        p = kai_params.Params(reservation_namespace=env.rr_ns)
        env.kube.core.create_namespaced_pod("tenant-x", kai_pods.pod(p, "other", "q", group="x", fraction=0.5))
        res = run_case(s, s.two_halves_share_one_gpu)
        env.kube.core.delete_namespace("tenant-x", grace_period_seconds=0)
        env.kube.core.delete_collection_namespaced_pod("tenant-x", grace_period_seconds=0)
    assert res.result == "failed"
    assert f"GPU GPU-0 on {node} carries 1.5 of a device" in res.reason and "tenant-x/other=0.5" in res.reason


# -- quota_reclaim ---------------------------------------------------------------------------------


def test_reclaim_pins_to_exactly_g_free_gpus_when_the_nodes_have_an_odd_number(env: Env) -> None:
    """Nodes with 3 + 4 free GPUs: the old pick_nodes planned G=6 but pinned to nodes with 7
    free, so B could start without a reclaim and A settled at 4, not its quota 3 (a timeout).
    Now a holder pod takes the odd GPU first."""
    small, big = env.node(3), env.node(4)
    ctx = env.ctx()
    adapter = kai_adapter.KaiAdapter(ctx)
    c = queueing_contract.Contract(ctx, adapter)
    nodes, g, total = c.pick_nodes()
    assert total == 7 and g == 6  # the old code pinned to 7 while planning for 6

    def bind_first_fit(pod: Any, _all: list[Any]) -> fake_kai.Decision:
        free = gpu_inventory.free_gpus(env.kube)
        return fake_kai.Bind(big if free[big] else small)

    with env.fake(bind_first_fit), adapter.space("reclaim", base.CaseResult("t", "passed")) as sp:
        sp.build(Dept("root", g + 1, (Team("a", 3), Team("b", 3), Team("hold", 1, preemptible=False))))
        c.hold_odd_gpu(sp, nodes, total % 2)
        free = gpu_inventory.free_gpus(env.kube)
        assert sorted(nodes) == sorted([small, big])
        assert sum(free[n] for n in nodes) == g
        holders = sp.ws.group_pods("holder")
        assert len(holders) == 1 and holders[0].spec.priority_class_name == "inference"
    adapter.close()


# -- watchdog -----------------------------------------------------------------------------------


class _Two(kai_suite.KaiSuite):
    components = ["binder"]


def test_a_crash_fails_only_the_case_it_happened_in_and_the_next_starts_fresh(env: Env) -> None:
    """binder restarts during case 1 and is not ready for a moment: case 1 fails naming it; case 2
    waits for it to be ready again and passes. With the baseline taken once, case 2 failed too."""
    ctx = env.ctx(wait_seconds=20)
    s = _Two(ctx)
    s.watchdog()

    def crash_in_the_middle(_ctx: base.SuiteContext, _res: base.CaseResult) -> None:
        fake_kai.pod_status(env.kube, env.kai_ns, "binder-0", ready=False, restarts=1)
        env.kube.apps.patch_namespaced_deployment_status("binder", env.kai_ns, {"status": {"readyReplicas": 0}})

        def recover() -> None:
            time.sleep(3)
            fake_kai.pod_status(env.kube, env.kai_ns, "binder-0", ready=True, restarts=1)
            env.kube.apps.patch_namespaced_deployment_status("binder", env.kai_ns, {"status": {"readyReplicas": 1}})

        threading.Thread(target=recover, daemon=True).start()
        s.wait("something that never happens", lambda: None)

    def quiet(_ctx: base.SuiteContext, _res: base.CaseResult) -> None:
        s.stays("nothing changes", lambda: True)

    t0 = time.monotonic()
    result = base.run_cases("t", ctx, [("one", s.guarded(crash_in_the_middle)), ("two", s.guarded(quiet))])
    one, two = result.cases
    assert one.result == "failed"
    assert f"KAI binder crashed during the case: pod {env.kai_ns}/binder-0 restarted (0 -> 1 restarts)" in one.reason
    assert two.result == "passed", two.reason
    assert time.monotonic() - t0 < 20


def test_a_crash_after_the_last_wait_still_fails_that_case(env: Env) -> None:
    s = _Two(env.ctx())
    s.watchdog()

    def crash_at_the_end(_ctx: base.SuiteContext, _res: base.CaseResult) -> None:
        fake_kai.pod_status(env.kube, env.kai_ns, "binder-0", ready=True, restarts=2)

    (case,) = base.run_cases("t", env.ctx(), [("c", s.guarded(crash_at_the_end))]).cases
    assert case.result == "failed" and "KAI binder crashed during the case" in case.reason


# -- reservation pods between cases -------------------------------------------------------------------


def test_cleanup_waits_for_kai_to_release_the_shared_gpus(env: Env) -> None:
    """KAI's binder deletes a reservation pod a moment after its last fraction pod. The old
    cleanup returned at once and the next case saw one GPU fewer free; now it waits."""
    node = env.node(8)
    s = make(fractional_gpu._Suite, env.ctx())
    with env.fake(lambda pod, _all: fake_kai.Bind(node, group="g-rel", device="GPU-2"), release_after=2.0):
        res = run_case(s, s.two_halves_share_one_gpu)
        assert res.result == "passed", res.reason
        assert gpu_inventory.free_gpus(s.kube)[node] == 8
        assert not env.kube.core.list_namespaced_pod(env.rr_ns).items


def test_a_shared_gpu_kai_never_releases_fails_the_case(env: Env) -> None:
    node = env.node(8)
    s = make(fractional_gpu._Suite, env.ctx(wait_seconds=3))
    with env.fake(lambda pod, _all: fake_kai.Bind(node, group="g-leak"), release_after=None):
        res = run_case(s, s.two_halves_share_one_gpu)
    assert res.result == "failed"
    assert "KAI did not release 1 shared GPU(s)" in res.reason and "g-leak" in res.reason
    assert "reservation pods still hold GPUs" in res.details["cleanup_problems"][0]


# -- gang -------------------------------------------------------------------------------------------


def _members(pod: Any, pods: list[Any]) -> list[Any]:
    group = (pod.metadata.annotations or {}).get(kai_pods.POD_GROUP_ANNOTATION)
    return [p for p in pods if p.metadata.namespace == pod.metadata.namespace
            and (p.metadata.annotations or {}).get(kai_pods.POD_GROUP_ANNOTATION) == group]


def test_gang_with_room_fails_a_scheduler_that_places_pods_one_by_one(env: Env) -> None:
    """Every pod fits, so a non-gang scheduler also scheduled all N: the old case passed. Now the
    first N-1 must stay unbound until the Nth exists."""
    node = env.node(8)
    with env.fake(lambda pod, _all: fake_kai.Bind(node)):
        res = contract_case(env.ctx(), "gang_with_room_starts_together")
    assert res.result == "failed"
    assert "gang started without all its members (3 of minMember 4 submitted, with room for all)" in res.reason

    def gang_scheduler(pod: Any, pods: list[Any]) -> fake_kai.Decision:
        group = (pod.metadata.annotations or {}).get(kai_pods.POD_GROUP_ANNOTATION)
        if group is None:
            return fake_kai.Bind(node)
        pg = env.kube.custom.get_namespaced_custom_object(kai_params.GROUP, "v2alpha2", pod.metadata.namespace,
                                                          "podgroups", group)
        return fake_kai.Bind(node) if len(_members(pod, pods)) >= pg["spec"]["minMember"] else None

    with env.fake(gang_scheduler):
        res = contract_case(env.ctx(), "gang_with_room_starts_together")
    assert res.result == "passed", res.reason
    assert res.details["min_member"] == 4 and res.details["partial_members_held"] == 3
    assert res.details["stack"] == "kai"
