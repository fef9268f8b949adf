"""The controller's pure projections: Node object -> engine view, which pods a drain evicts,
and the verification pod built from the chart's template."""

from __future__ import annotations

from gpucatalog.gpuhealth import controller, engine
from gpucatalog.gpuhealth.xidpolicy import Action


def node(conditions: list[dict[str, str]], **spec: object) -> dict[str, object]:
    return {"metadata": {"name": "gpu-0", "labels": {engine.STATE_LABEL: "draining"},
                         "annotations": {engine.A_CORDONED_BY: "gpu-health"}, "resourceVersion": "7"},
            "spec": dict(spec), "status": {"conditions": conditions}}


def test_node_view_takes_the_strongest_fault_and_ignores_other_conditions() -> None:
    v = controller.node_view(node([
        {"type": "Ready", "status": "True", "message": "action=HARDWARE_REPAIR; not ours"},
        {"type": "GpuXidError", "status": "True", "message": "action=REBOOT; GPU 2 …",
         "lastTransitionTime": "2026-12-02T10:00:00Z"},
        {"type": "GpuMemoryError", "status": "True", "message": "action=RESET_GPU; GPU 1 …",
         "lastTransitionTime": "2026-12-02T10:00:05Z"},
        {"type": "GpuPcieDegraded", "status": "Unknown", "message": "probe failed"},
        {"type": "GpuNvlinkDown", "status": "False", "message": "action=REBOOT; stale text"},
    ], unschedulable=True))
    assert v.fault is Action.REBOOT and v.fault_unknown and v.unschedulable and v.owned
    assert v.state == "draining" and v.detected_at == "2026-12-02T10:00:05Z"
    assert "GpuXidError" in v.fault_summary and "GpuMemoryError" in v.fault_summary
    healthy = controller.node_view(node([{"type": "GpuXidError", "status": "False", "message": "x"}]))
    assert healthy.fault is None and not healthy.unschedulable


def test_drain_skips_daemonsets_mirror_finished_and_own_verify_pods() -> None:
    def pod(ns: str, name: str, **extra: object) -> dict[str, object]:
        meta: dict[str, object] = {"namespace": ns, "name": name}
        meta.update(extra)
        return {"metadata": meta, "status": {"phase": "Running"}}

    assert controller.drainable(pod("team-a", "train-0"), "gpu-health")
    assert not controller.drainable(pod("gpu-health", "gpu-health-agent-x",
                                        ownerReferences=[{"kind": "DaemonSet"}]), "gpu-health")
    assert not controller.drainable(pod("kube-system", "static", annotations={"kubernetes.io/config.mirror": "x"}),
                                    "gpu-health")
    assert not controller.drainable(pod("gpu-health", "gpu-health-verify-gpu-0"), "gpu-health")
    done = pod("team-a", "job-0")
    done["status"] = {"phase": "Succeeded"}
    assert not controller.drainable(done, "gpu-health")


def test_verify_pod_is_pinned_tagged_and_never_restarted() -> None:
    template = {"metadata": {"annotations": {"gpu-health.gpu-catalog.io/host-access.kmsg": "/dev/kmsg"}},
                "spec": {"containers": [{"name": "verify", "args": ["verify"]}]}}
    pod = controller.verify_pod(template, "gpu-0", "gpu-health", "2026-12-02T10:00:00.000000Z")
    assert pod["metadata"]["name"] == "gpu-health-verify-gpu-0" and pod["metadata"]["namespace"] == "gpu-health"
    assert pod["metadata"]["annotations"][controller.VERIFY_FOR] == "2026-12-02T10:00:00.000000Z"
    assert "gpu-health.gpu-catalog.io/host-access.kmsg" in pod["metadata"]["annotations"]
    assert pod["spec"]["nodeName"] == "gpu-0" and pod["spec"]["restartPolicy"] == "Never"
    assert {"operator": "Exists"} in pod["spec"]["tolerations"]
    assert {"name": "NODE_NAME", "value": "gpu-0"} in pod["spec"]["containers"][0]["env"]
    assert "nodeName" not in template.get("spec", {})  # the template is not modified


def test_dry_run_logs_the_plan_and_calls_no_api() -> None:
    """The API client points at a closed port: any request would raise TemporaryError."""
    import pytest
    from kubernetes import client as k8s_client

    from gpucatalog.gpuhealth import kube
    from gpucatalog.gpuhealth.actuator import from_config
    from gpucatalog.gpuhealth.breaker import Breaker
    from gpucatalog.gpuhealth.errors import TemporaryError

    api = kube.Api(k8s_client.ApiClient(k8s_client.Configuration(host="http://127.0.0.1:1")), timeout=1)
    view = engine.NodeView("gpu-0", {}, {}, False, Action.REBOOT, fault_summary="XID 79")
    plan = engine.decide(view, engine.Budget(Breaker(), 10), engine.Policy(), 1_800_000_000.0)
    assert plan.unschedulable is True
    raw = {"metadata": {"name": "gpu-0", "resourceVersion": "1"}}
    lines: list[str] = []
    dry = controller.Controller(api, controller.ControllerConfig("gpu-health", policy=engine.Policy(dry_run=True)),
                                from_config(None), logger=lambda msg, **kv: lines.append(f"{msg} {kv}"))
    dry.execute(plan, raw, 1_800_000_000.0)
    assert lines and lines[0].startswith("DRY-RUN plan") and "unschedulable" in lines[0]
    live = controller.Controller(api, controller.ControllerConfig("gpu-health"), from_config(None),
                                 logger=lambda msg, **kv: None)
    with pytest.raises(TemporaryError, match="unreachable"):
        live.execute(plan, raw, 1_800_000_000.0)
