"""The fill-every-GPU-then-one-more scenario (a scheduler's own upstream test pattern), shared by
the live tests that run it under kube-scheduler and under Kueue.

Every free GPU of the cluster is filled with one-GPU batch Jobs whose container sleeps until the
pod is deleted; then one more such Job is created. On a real cluster the fillers keep their GPUs,
so the extra Job's pod stays Pending with PodScheduled False, reason Unschedulable. (The sim's
old rule, every Job pod completing with exit 0 at once, freed the GPUs and let it run.)
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from tests.clusters.sim import waiting

GPU = "nvidia.com/gpu"
IMAGE = "busybox:1.36"


def _gpus(pod: Any) -> int:
    return sum(int(((c.resources.limits if c.resources else None) or {}).get(GPU, 0)) for c in pod.spec.containers)


def free_gpus(core: Any, namespace: str) -> int | None:
    """GPUs no pod holds, once no GPU pod outside ``namespace`` is on its way in or out (None
    while one is: its GPUs would change hands during the scenario)."""
    total = sum(int((n.status.allocatable or {}).get(GPU, 0)) for n in core.list_node().items)
    used = 0
    for p in core.list_pod_for_all_namespaces().items:
        gpus = _gpus(p)
        if not gpus or p.metadata.namespace == namespace or (p.status.phase in ("Succeeded", "Failed")):
            continue
        if p.metadata.deletion_timestamp is not None or not p.spec.node_name:
            return None
        used += gpus
    return total - used


def job(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A one-GPU batch Job whose container sleeps until its pod is deleted."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {"spec": {
                "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "infinity"],
                                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                              "limits": {GPU: "1"}}}]}}}}


def _job_pod(core: Any, ns: str, name: str) -> Any:
    pods = core.list_namespaced_pod(ns, label_selector=f"job-name={name}").items
    return pods[0] if pods else None


def _unschedulable(pod: Any) -> bool:
    return pod is not None and not pod.spec.node_name and any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in (pod.status.conditions or []))


def fill_then_one_more(api: Any, ns: str, labels: dict[str, str] | None = None, timeout: float = 120.0) -> dict[str, Any]:
    """Run the scenario in ``ns``; returns what it saw (fillers, the extra pod's condition message)."""
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    free = waiting.wait("no GPU pod of another test on its way in or out",
                        lambda: (lambda f: None if f is None else [f])(free_gpus(core, ns)), timeout)[0]
    assert free > 0, "no free GPU to fill"
    names = [f"filler-{i}" for i in range(free)]
    for name in names:
        batch.create_namespaced_job(ns, job(name, labels))

    def all_running() -> bool:
        pods = [_job_pod(core, ns, n) for n in names]
        return all(p is not None and p.status.phase == "Running" for p in pods)

    waiting.wait(f"all {free} fillers to run", all_running, timeout)
    batch.create_namespaced_job(ns, job("one-more", labels))
    extra = waiting.wait("the extra Job's pod to be Unschedulable",
                         lambda: (lambda p: p if _unschedulable(p) else None)(_job_pod(core, ns, "one-more")), timeout)
    # the fillers still hold every GPU: none ended on its own
    phases = {n: _job_pod(core, ns, n).status.phase for n in names}
    assert set(phases.values()) == {"Running"}, phases
    again = _job_pod(core, ns, "one-more")
    assert again.status.phase == "Pending" and not again.spec.node_name
    cond = next(c for c in extra.status.conditions if c.type == "PodScheduled")
    # fillers the sim kubelet ran as real `sleep infinity` processes (kwok's have no container ID)
    real = [n for n in names if str(_job_pod(core, ns, n).status.container_statuses[0].container_id or "")
            .removeprefix("sim://") not in ("", "0")]
    return {"fillers": free, "real": len(real), "message": cond.message}
