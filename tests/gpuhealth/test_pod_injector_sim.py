"""The pod fault injector live on the sim cluster: the sim kubelet runs its privileged pod (the
gpu-health image, the agent's host root, the node's kernel log as a read-write hostPath) as a
real process that writes a synthetic XID line into the node folder's ``dev/kmsg``, and the real
gpu-health agent and controller act on it. What a cluster without fault injection reports, and
that an injector whose line never reaches the agent fails the XID case."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from gpucatalog.validators.conformance.kit import base, kube_client, pod_injector
from gpucatalog.validators.conformance.remediation import env as remediation_env
from gpucatalog.validators.conformance.remediation import fault_remediation

from .conftest import BUNDLE_VALUES, GPU_HEALTH_NAMESPACE

pytestmark = [pytest.mark.integration]

XID_CASES = ("xid79_cordon_drain_repair_verify_uncordon", "application_xid_event_no_cordon",
             "breaker_caps_quarantines_when_most_nodes_fault", "manual_cordon_never_uncordoned")
DRIVER_CASES = ("pending_row_remap_gpu_reset", "failed_row_remap_hardware_repair", "ib_port_half_rate_detected",
                "busy_narrowed_pcie_link_quarantined")


def _installed_agent(cluster: Any) -> pod_injector.AgentTemplate:
    kube = kube_client.Kube(cluster.kubeconfig())
    ds = kube.request("GET", f"/apis/apps/v1/namespaces/{GPU_HEALTH_NAMESPACE}/daemonsets/gpu-health-agent")
    agent = pod_injector.agent_template([ds])
    assert agent is not None
    return agent


def _ctx(cluster: Any, logs: list[str], **params: Any) -> base.SuiteContext:
    return base.SuiteContext(kubeconfig=cluster.kubeconfig(), params={"gpu_health_namespace": GPU_HEALTH_NAMESPACE,
                                                                      "bundle_values": BUNDLE_VALUES, **params},
                             log=lambda m: logs.append(f"{time.strftime('%H:%M:%S')} {m}"))


def _show(result: base.SuiteResult, logs: list[str]) -> dict[str, str]:
    print("\n".join(logs))
    for c in result.cases:
        print(c.name, c.result, round(c.seconds, 1), c.reason[:200], c.details)
    return {c.name: c.result for c in result.cases}


@pytest.mark.timeout(600)
def test_without_an_injector_the_fault_cases_are_not_run(gpu_health_cluster: Any) -> None:
    logs: list[str] = []
    result = fault_remediation.run(_ctx(gpu_health_cluster, logs))
    got = _show(result, logs)
    assert got.pop("agents_report_conditions") == "passed" and got.pop("idle_gpus_never_quarantined") == "passed"
    assert set(got.values()) == {"skipped"}
    assert result.result == "incomplete"
    reasons = {c.name: c.reason for c in result.cases if c.result == "skipped"}
    assert all("this run injects none: certify with --inject-faults" in r for r in reasons.values())
    assert "needs a xid fault" in reasons["breaker_caps_quarantines_when_most_nodes_fault"]  # not its cleanup's
    # a case that could not run left nothing behind (the xid case's workload namespace is gone)
    kube = kube_client.Kube(gpu_health_cluster.kubeconfig())
    left = [n["metadata"]["name"] for n in kube.request("GET", "/api/v1/namespaces")["items"]
            if n["metadata"]["name"].startswith("fault-remediation-") and not n["metadata"].get("deletionTimestamp")]
    assert left == []
    # nor a node cordoned by a case that could not inject (manual-cordon uncordons in its cleanup)
    cordoned = [n["metadata"]["name"] for n in kube.request("GET", "/api/v1/nodes")["items"]
                if (n.get("spec") or {}).get("unschedulable")]
    assert cordoned == []


@pytest.mark.timeout(600)
def test_an_injector_whose_line_misses_the_agent_fails_the_xid_case(gpu_health_cluster: Any) -> None:
    """The pod runs and succeeds, but writes its XID line into a file the agent does not read
    (a hostPath beside the kernel log): the full-cycle case fails waiting for the condition."""
    agent = _installed_agent(gpu_health_cluster)
    wrong = copy.deepcopy(agent.kmsg_volume)
    wrong["hostPath"] = {"path": "/var/tmp/not-the-kernel-log", "type": "FileOrCreate"}
    inj = pod_injector.PodInjector(gpu_health_cluster.kubeconfig(),
                                   pod_injector.AgentTemplate(**{**agent.__dict__, "kmsg_volume": wrong}))
    env = remediation_env.Env(_ctx(gpu_health_cluster, [], inject_fault=inj.inject_fault, clear_fault=inj.clear_fault))
    try:
        with pytest.raises(base.WaitTimeout, match="GpuXidError=True naming XID 79"):
            fault_remediation.case_xid79_full_cycle(env, base.CaseResult("xid79", "passed"))
    finally:
        inj.close()
    wrote, cleared = inj.runs  # the pod did write its line, just not where the agent reads; the clear took it out
    assert wrote["exitCode"] == 0 and "name=gpu-catalog-inject" in wrote["output"]
    assert cleared["exitCode"] == 0 and "removed 1 synthetic XID record(s)" in cleared["output"]
    kmsg = (gpu_health_cluster.node_dir(wrote["node"]) / "dev" / "kmsg").read_text()
    assert "gpu-catalog-inject" not in kmsg


@pytest.mark.timeout(1500)
def test_xid_cases_pass_through_the_pod_injector_and_driver_cases_are_not_run(gpu_health_cluster: Any) -> None:
    inj = pod_injector.PodInjector(gpu_health_cluster.kubeconfig(), _installed_agent(gpu_health_cluster))
    logs: list[str] = []
    try:
        result = fault_remediation.run(_ctx(gpu_health_cluster, logs, inject_fault=inj.inject_fault,
                                            clear_fault=inj.clear_fault))
    finally:
        inj.close()
    got = _show(result, logs)
    for run in inj.runs:
        print("injector pod", run)
    assert {n: got[n] for n in ("agents_report_conditions", "idle_gpus_never_quarantined", *XID_CASES)} == dict.fromkeys(
        ("agents_report_conditions", "idle_gpus_never_quarantined", *XID_CASES), "passed")
    assert {n: got[n] for n in DRIVER_CASES} == dict.fromkeys(DRIVER_CASES, "skipped")
    assert result.result == "incomplete"
    # the XIDs came from the injector's pods, which ran on the nodes and said what they wrote
    written = [r for r in inj.runs if "--code" in r["args"]]
    assert written and all(r["exitCode"] == 0 and "name=gpu-catalog-inject" in r["output"] for r in written)
    assert {r["args"][r["args"].index("--code") + 1] for r in written} == {"79", "13", "43"}


def _controller_breaker_share(cluster: Any, share: str) -> None:
    """Roll gpu-health's controller out with ``--breaker-max-share=share`` and wait for it."""
    kube = kube_client.Kube(cluster.kubeconfig())
    path = f"/apis/apps/v1/namespaces/{GPU_HEALTH_NAMESPACE}/deployments/gpu-health-controller"
    dep = kube.request("GET", path)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    c["args"] = [a for a in c["args"] if not a.startswith("--breaker-max-share=")] + [f"--breaker-max-share={share}"]
    gen = kube.request("PUT", path, dep)["metadata"]["generation"]

    def rolled_out() -> bool:
        d = kube.request("GET", path)
        st, want = d.get("status") or {}, d["spec"]["replicas"]
        pods = kube.request("GET", f"/api/v1/namespaces/{GPU_HEALTH_NAMESPACE}/pods", query={
            "labelSelector": "app.kubernetes.io/component=controller"})["items"]
        return (st.get("observedGeneration", 0) >= gen and st.get("updatedReplicas") == want
                and st.get("availableReplicas") == want and len(pods) == want)

    base.wait_for(f"gpu-health's controller rolled out with --breaker-max-share={share}", rolled_out, 180)


@pytest.mark.timeout(900)
def test_the_breaker_case_fails_when_the_breaker_lets_every_fault_through(gpu_health_cluster: Any) -> None:
    """The breaker case as the pod injector runs it (faults together, quarantines counted as
    seen) can fail: a controller whose breaker allows every node (max share 1) quarantines all
    the faulty nodes and never trips."""
    inj = pod_injector.PodInjector(gpu_health_cluster.kubeconfig(), _installed_agent(gpu_health_cluster))
    env = remediation_env.Env(_ctx(gpu_health_cluster, [], inject_fault=inj.inject_fault, clear_fault=inj.clear_fault))
    _controller_breaker_share(gpu_health_cluster, "1")
    res = base.CaseResult("breaker", "passed")
    try:
        with pytest.raises(base.CaseFailed, match="breaker CLOSED"):
            fault_remediation.case_breaker_caps_quarantines(env, res)
    finally:
        inj.close()
        _controller_breaker_share(gpu_health_cluster, "0.25")
    assert res.details["quarantined"] == res.details["faulty"] == 5 and res.details["refused"] == 0
