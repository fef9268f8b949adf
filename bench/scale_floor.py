"""Benchmark: the sim's own floor under the scale suite's fill, so that a stack's fill time can be
stated as time above that floor.

On one sim cluster of ``--nodes`` x 8 GPUs and a CPU node, with gpu-queueing 0.4.4's Kueue and team
queues installed (its ``scale`` values), the same number of one-GPU ``pause`` pods (kwok runs
them) is placed three ways, each on the same pool of ``--gpus`` GPUs (the other GPU nodes
cordoned, as the suite's ``gpus`` does), one after the other:

- **floor**: pods naming a scheduler that does not exist, bound by this script as they appear, to
  the next pool node with a free GPU (Binding API, 8 threads): the API server, etcd and kwok
  with no scheduling decision at all;
- **kube-scheduler**: the same pods, default scheduler, no queue;
- **Kueue**: the suite's ``fill_single_gpu_jobs`` (a Job per unit through the team queues).

Each figure is seconds from the first create to the last pod bound; pods are created one after
the other in every run, as the suite submits. Printed: each time, pods a second, and each time
minus the floor.

    PYTHONPATH=$PWD python3 bench/scale_floor.py [--nodes 500] [--gpus 400]
"""

from __future__ import annotations

import argparse
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from gpucatalog.catalog import install, loader, render
from gpucatalog.clusters.sim import SimCluster
from gpucatalog.validators.conformance.kit import base, gpu_inventory, kube_client
from gpucatalog.validators.conformance.queueing import scale
from gpucatalog.validators.conformance.queueing_suites import adapters as queueing_adapters

REPO = Path(__file__).resolve().parents[1]
NOBODY = "gpu-catalog-bench-binder"  # no scheduler has this name: only this script binds these pods
NO_LIMIT = dict.fromkeys(scale.THRESHOLDS.values(), 1e9)


def pod(name: str, scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
        "tolerations": [{"key": gpu_inventory.GPU, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {
            "requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {gpu_inventory.GPU: "1"}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {base.SUITE_LABEL: "floor"}},
            "spec": spec}


def bound(kube: kube_client.Kube, ns: str) -> int:
    found = kube.request("GET", f"/api/v1/namespaces/{ns}/pods", accept=scale.METADATA_ONLY,
                         query={"fieldSelector": "spec.nodeName!="})
    return len(found.get("items") or [])


def place(kube: kube_client.Kube, n: int, binder: bool) -> float:
    """``n`` pods in a fresh namespace, bound by this script (``binder``) or kube-scheduler;
    seconds from the first create until all are bound. The namespace goes afterwards."""
    ns = f"bench-floor-{secrets.token_hex(3)}"
    kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    free = gpu_inventory.free_gpus(kube)
    slots = iter([node for node, count in sorted(free.items()) for _ in range(count)])
    lock = threading.Lock()
    created: list[str] = []
    futures: list[Future[None]] = []

    def bind(name: str) -> None:
        with lock:  # one generator, several threads
            node = next(slots)
        kube.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    def binder_loop(pool: ThreadPoolExecutor) -> None:
        handed = 0
        while handed < n:
            ready = created[handed:]
            futures.extend(pool.submit(bind, name) for name in ready)
            handed += len(ready)
            time.sleep(0.05)

    def all_bound() -> bool | None:
        for f in futures:  # a failed bind ends the run with its error, not a timeout
            if f.done() and f.exception() is not None:
                raise base.CaseFailed(f"bind failed: {f.exception()}")
        return bound(kube, ns) >= n or None

    try:
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            loop = threading.Thread(target=binder_loop, args=(pool,), daemon=True)
            if binder:
                loop.start()
            for i in range(n):
                kube.request("POST", f"/api/v1/namespaces/{ns}/pods", pod(f"p-{i}", NOBODY if binder else None))
                created.append(f"p-{i}")
            base.wait_for(f"all {n} pods bound", all_bound, 900, interval=1.0)
            took = time.monotonic() - t0
            if binder:
                loop.join()
        return took
    finally:
        kube.request("DELETE", f"/api/v1/namespaces/{ns}", ok404=True)
        base.wait_for(f"namespace {ns} gone", lambda: not kube.request(
            "GET", f"/api/v1/namespaces/{ns}", ok404=True) or None, 600, interval=1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--gpus", type=int, default=400, help="the pool: GPUs of whole idle nodes left schedulable")
    a = ap.parse_args()
    rb = render.render_bundle(loader.load_catalog(REPO / "catalog"), "gpu-queueing@0.4.4", "scale")
    rb.components = [c for c in rb.components if c.name in ("kueue", "team-queues")]
    cluster = SimCluster("bench-scale-floor")
    if cluster.layout.root.exists():  # a leftover of an interrupted run
        cluster.down()
    try:
        kc = cluster.up(a.nodes, "h100-80gb-x8")
        cluster.add_nodes(1, "cpu")
        cluster.wait_ready(300)
        cluster.start_services([o for c in rb.components for o in c.objects])
        install.install(rb, kc, timeout_s=600, gates=False)
        ctx = base.SuiteContext(kubeconfig=kc, params={
            "bundle_values": {c.name: c.values for c in rb.components}, "stack": "kueue", "gpus": a.gpus,
            "thresholds": NO_LIMIT})
        adapter = queueing_adapters.adapter_for(ctx)
        s = scale.Scale(ctx, adapter, scale.parse(ctx.params))
        kube = adapter.kube
        times: dict[str, float] = {}
        try:
            for label, binder in (("floor (this script binds)", True), ("kube-scheduler", False)):
                res = base.CaseResult(label, "passed")
                with s.pool(res):
                    times[label] = place(kube, sum(gpu_inventory.free_gpus(kube).values()), binder)
                print(f"{label}: {times[label]:.1f}s", flush=True)
            res = base.CaseResult("fill_single_gpu_jobs", "passed")
            s.run("fill_single_gpu_jobs", res)
            times["Kueue (the suite's fill)"] = float(res.details["fill_s"])
        finally:
            adapter.close()
        n = a.gpus
        floor = next(iter(times.values()))
        print(f"\nfill of {n} one-GPU pods on a {a.nodes}-node sim (pool of {n} GPUs)")
        print(f"  {'':28}{'seconds':>9}{'pods/s':>9}{'over floor':>12}")
        for label, secs in times.items():
            print(f"  {label:28}{secs:>9.1f}{n / secs:>9.1f}{secs - floor:>11.1f}s")
    finally:
        cluster.down()


if __name__ == "__main__":
    main()
