"""gpu-health on the sim cluster: the real chart installed with real helm, the agent and
controller run by the sim kubelet as processes (with their ServiceAccount's RBAC), faults
injected into node folders, and the ``fault_remediation`` conformance suite judging the result.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .conftest import BUNDLE_VALUES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]  # a whole remediation per case; slow on a busy machine

NAMESPACE = "gpu-health"


def test_fault_remediation_suite_passes_on_sim(gpu_health_cluster: Any) -> None:
    from gpucatalog.validators.conformance.kit import base
    from gpucatalog.validators.conformance.remediation import fault_remediation

    logs: list[str] = []
    ctx = base.SuiteContext(
        kubeconfig=gpu_health_cluster.kubeconfig(),
        params={"inject_fault": gpu_health_cluster.inject_fault, "gpu_health_namespace": NAMESPACE,
                                    "bundle_values": BUNDLE_VALUES},
        log=lambda m: logs.append(f"{time.strftime('%H:%M:%S')} {m}"),
    )
    result = fault_remediation.run(ctx)
    failed = [(c.name, c.reason) for c in result.cases if c.result != "passed"]
    print("\n".join(logs))
    for c in result.cases:
        print(c.name, c.result, round(c.seconds, 1), c.details)
    assert not failed, failed


def _old_check_agent(cluster: Any, node: str, stop: Any) -> None:
    """What gpu-health did before issue 17, standing in for the agent on ``node``: the current
    PCIe link judged against the GPU's own maximum at every reading, idle or not (gen: an
    Event; width: hardware repair), published with the product's own condition/Event code."""
    from gpucatalog.gpuhealth import agent, conditions, engine, kube, parse_nvsmi
    from gpucatalog.gpuhealth.findings import Family, Finding, Observation
    from gpucatalog.gpuhealth.xidpolicy import Action

    api = kube.Api(kube.load(str(cluster.kubeconfig())))
    while not stop.is_set():
        smi = parse_nvsmi.parse((cluster.node_dir(node) / "sim" / "nvidia-smi-q-x.xml").read_text())
        found = []
        for g in smi.gpus:
            subject = f"GPU {g.index} (PCI {g.pci_bus_id}, {g.uuid})"
            if g.pcie_width_current and g.pcie_width_max and g.pcie_width_current < g.pcie_width_max:
                found.append(Finding(Family.PCIE, "PcieWidthDegraded", Action.HARDWARE_REPAIR, subject, "width"))
            if g.pcie_gen_current and g.pcie_gen_max and g.pcie_gen_current < g.pcie_gen_max:
                found.append(Finding(Family.PCIE, "PcieGenDegraded", Action.NONE, subject,
                                     f"PCIe link gen {g.pcie_gen_current}, expected gen {g.pcie_gen_max}"))
        conds, events = conditions.build(Observation(findings=found))
        now = engine.iso(time.time())
        current = {c["type"]: c for c in (api.get(f"/api/v1/nodes/{node}").get("status") or {}).get("conditions") or []}
        api.patch_node_conditions(node, [c.to_api(now, current.get(c.type)) for c in conds])
        for ev in events:
            api.create_event("default", node, ev.type, ev.reason, ev.message, "old-check",
                             name=agent.event_name(node, "old-check/" + ev.key), now_iso=now)
        stop.wait(0.5)


def test_idle_case_fails_when_idle_links_are_judged(gpu_health_cluster: Any) -> None:
    """The idle case can fail: with the pre-issue-17 check judging the idle node's gen-1 link in
    place of the agent, the case reports the PCIe Warning Events that check raises."""
    import threading

    from kubernetes import client

    from gpucatalog.validators.conformance.kit import base
    from gpucatalog.validators.conformance.remediation import env as remediation_env
    from gpucatalog.validators.conformance.remediation import fault_remediation

    ctx = base.SuiteContext(kubeconfig=gpu_health_cluster.kubeconfig(),
                            params={"inject_fault": gpu_health_cluster.inject_fault, "gpu_health_namespace": NAMESPACE,
                                    "bundle_values": BUNDLE_VALUES})
    env = remediation_env.Env(ctx)
    node = env.nodes[0]
    apps = client.AppsV1Api(gpu_health_cluster.api_client())
    core = client.CoreV1Api(gpu_health_cluster.api_client())

    def agent_pods() -> list[Any]:
        return [p for p in core.list_namespaced_pod(NAMESPACE, field_selector=f"spec.nodeName={node}").items
                if (p.metadata.labels or {}).get("app.kubernetes.io/component") == "agent"]

    away = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [node]}]}]}}}
    apps.patch_namespaced_daemon_set("gpu-health-agent", NAMESPACE, {"spec": {"template": {"spec": {"affinity": away}}}})
    stop = threading.Event()
    old = threading.Thread(target=_old_check_agent, args=(gpu_health_cluster, node, stop), daemon=True)
    try:
        base.wait_for("the agent gone from the node", lambda: not agent_pods(), 120)
        old.start()
        with pytest.raises(base.CaseFailed, match="PCIe Warning Events"):
            fault_remediation.case_idle_gpus_never_quarantined(env, base.CaseResult("idle", "passed"))
    finally:
        stop.set()
        old.join(10)
        for ev in core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items:
            if ev.source and ev.source.component == "old-check":
                core.delete_namespaced_event(ev.metadata.name, "default")
        apps.patch_namespaced_daemon_set("gpu-health-agent", NAMESPACE,
                                         {"spec": {"template": {"spec": {"affinity": None}}}})
        base.wait_for("the agent back on the node", lambda: any(
            (p.status.phase == "Running") for p in agent_pods()), 120)
