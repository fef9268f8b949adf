"""Benchmark: kube-scheduler's DRA allocation of shared GPUs at scale, on the sim cluster.

Starts a sim cluster of N ``h100-80gb-x8`` nodes (default 100), publishes every node's GPUs as
the sim DRA publisher does in ``shared`` mode (the publisher's own functions, no process per
node), creates the chart's DeviceClasses and one ResourceClaimTemplate asking for 1/K of a GPU's
memory, then pods using it: K per GPU (default 4, so 100 x 8 x 4 = 3,200 claims, every share of
every GPU). Then churn: R rounds, each deleting a fraction of the running pods and creating as
many new ones. Prints:

* ``fill_claims_per_s``: claims allocated (pods bound) per second while filling the cluster,
  from the first create to the last bind;
* ``fill_latency_p50/p95_s``: per pod, create to bound (the claim made from the template by the
  resource-claim controller, allocated by the scheduler);
* ``churn_claims_per_s`` and ``churn_latency_p50/p95_s``: the same for the pods created while
  others are deleted (each new pod can only take a share a deleted one freed);
* ``rss_mib``: resident memory of etcd, kube-apiserver, kube-scheduler and
  kube-controller-manager at full load.

    PYTHONPATH=. python3 bench/dra_allocation.py                 # 100 nodes, 4 claims per GPU
    PYTHONPATH=. python3 bench/dra_allocation.py --nodes 10 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

from gpucatalog.clusters import shapes
from gpucatalog.clusters.sim import SimCluster, dra, drapublisher, nodefs, procs
from gpucatalog.core import executor
from gpucatalog.toolchain import build
from gpucatalog.validators.conformance.dra import workspace as dra_workspace

SHAPE = "h100-80gb-x8"
NS = "bench-dra"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


class Binds:
    """Polls the namespace's pods (every 0.25 s) and records when each was first seen bound."""

    def __init__(self, core: Any) -> None:
        self.bound: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stop = False
        self.thread = threading.Thread(target=self._run, args=(core,), daemon=True)
        self.thread.start()

    def _run(self, core: Any) -> None:
        while not self.stop:
            pods = core.list_namespaced_pod(NS, resource_version="0").items
            now = time.monotonic()
            with self.lock:
                for p in pods:
                    if p.spec.node_name:
                        self.bound.setdefault(p.metadata.name, now)
            time.sleep(0.25)

    def wait(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(n in self.bound for n in names):
                    return
            time.sleep(0.2)
        missing = [n for n in names if n not in self.bound]
        raise SystemExit(f"{len(missing)} pods not bound after {timeout:.0f}s (first: {missing[:3]})")


def _create(core: Any, names: list[str], created: dict[str, float], workers: int = 8) -> None:
    def one(name: str) -> None:
        created[name] = time.monotonic()
        core.create_namespaced_pod(NS, {"metadata": {"name": name}, "spec": {
            "containers": [{"name": "work", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "share"}],
            "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False}})

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, names))


def _rss_mib(c: SimCluster) -> dict[str, float]:
    out = {}
    for name in CONTROL_PLANE:
        rec = procs.read(c.layout.pids / f"{name}.pid")
        if rec is None:
            continue
        for line in Path(f"/proc/{rec.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out[name] = int(line.split()[1]) / 1024
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--claims-per-gpu", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5, help="churn rounds")
    ap.add_argument("--churn", type=float, default=0.1, help="fraction of the pods replaced per round")
    args = ap.parse_args()
    shape = shapes.get(SHAPE)
    assert shape.gpu is not None
    c = SimCluster(f"bench-dra-{os.getpid()}")
    t_up = time.monotonic()
    c.up(args.nodes, SHAPE, timeout=600)
    try:
        api = c.api_client()
        core: Any = client.CoreV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        rendered = executor.run([build.ensure("helm"), "template", "dra", "charts/nvidia-dra-driver",
                                 "--show-only", "templates/deviceclasses.yaml"]).stdout
        executor.run([build.ensure("kubectl"), "--kubeconfig", c.kubeconfig(), "apply", "-f", "-"], input=rendered)
        nodes = sorted(n.metadata.name for n in core.list_node().items)
        for node in nodes:
            gpus = nodefs.healthy_hw(shape, c.name, node)["gpus"]
            drapublisher.reconcile(custom, node, dra.slice_specs(node, shape, gpus, "shared"))
        print(f"cluster of {len(nodes)} nodes up and published in {time.monotonic() - t_up:.0f}s", flush=True)
        core.create_namespace({"metadata": {"name": NS}})
        while not core.list_namespaced_service_account(NS).items:  # pods are refused until it exists
            time.sleep(0.2)
        share = f"{shape.gpu.memory_mib // args.claims_per_gpu}Mi"
        custom.create_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "share"},
            "spec": {"spec": dra_workspace.claim_spec(dra_workspace.shared_request(share))}})
        binds = Binds(core)
        total = len(nodes) * shape.gpu.count * args.claims_per_gpu
        names = [f"p{i:05d}" for i in range(total)]
        created: dict[str, float] = {}
        t0 = time.monotonic()
        _create(core, names, created)
        binds.wait(names, 60 + total * 0.5)
        fill = [binds.bound[n] - created[n] for n in names]
        fill_s = max(binds.bound[n] for n in names) - t0
        rss = _rss_mib(c)
        print(f"fill: {total} claims ({share} each, {args.claims_per_gpu} per GPU) in {fill_s:.1f}s "
              f"fill_claims_per_s={total / fill_s:.1f} fill_latency_p50_s={_pct(fill, 0.5):.2f} "
              f"fill_latency_p95_s={_pct(fill, 0.95):.2f}", flush=True)
        print("rss_mib " + " ".join(f"{k}={v:.0f}" for k, v in rss.items()) + f" total={sum(rss.values()):.0f}",
              flush=True)
        running, churn_lat, churn_n, churn_s, serial = list(names), [], 0, 0.0, total
        for r in range(args.rounds):
            k = max(1, int(len(running) * args.churn))
            gone, running = running[:k], running[k:]
            fresh = [f"p{serial + i:05d}" for i in range(k)]
            serial += k
            t1 = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda n: core.delete_namespaced_pod(n, NS, grace_period_seconds=0), gone))
            _create(core, fresh, created)
            binds.wait(fresh, 60 + k * 0.5)
            churn_s += max(binds.bound[n] for n in fresh) - t1
            churn_lat += [binds.bound[n] - created[n] for n in fresh]
            churn_n += k
            running += fresh
            print(f"churn round {r + 1}: {k} deleted, {k} created and allocated", flush=True)
        if churn_n:
            print(f"churn: {churn_n} claims churn_claims_per_s={churn_n / churn_s:.1f} "
                  f"churn_latency_p50_s={_pct(churn_lat, 0.5):.2f} churn_latency_p95_s={_pct(churn_lat, 0.95):.2f}",
                  flush=True)
        binds.stop = True
    finally:
        c.down()


if __name__ == "__main__":
    main()
