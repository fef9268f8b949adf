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
  kube-controller-manager at full load;
* ``cpu_s``: CPU seconds each process of the cluster (and this one) used during the fill: where
  the two cores went;
* with ``--upstream``: kube-scheduler's own DRA throughput on this machine first, from upstream's
  scheduler_perf (default workload ``SchedulingWithResourceClaimTemplate/2000pods_100nodes``:
  1,000 pods with one claim each on 100 nodes, after 1,000 placed), and ``fill_vs_upstream``,
  the fill's claims/s over its pods/s. Its shape differs from the fill's (whole devices of a test
  driver, not shares of GPU memory; no kubelet, resource-claim controller or network hop): the
  ratio says how much of the scheduler's own rate the sim delivers end to end.

    PYTHONPATH=. python3 bench/dra_allocation.py                 # 100 nodes, 4 claims per GPU
    PYTHONPATH=. python3 bench/dra_allocation.py --nodes 10 --rounds 2
    PYTHONPATH=. python3 bench/dra_allocation.py --rounds 0 --upstream   # against scheduler_perf
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpucatalog.clusters import shapes
from gpucatalog.clusters.sim import SimCluster, dra, drapublisher, nodefs, procs
from gpucatalog.core import executor, kubeapi
from gpucatalog.toolchain import build
from gpucatalog.validators.conformance.dra import workspace as dra_workspace

SHAPE = "h100-80gb-x8"
NS = "bench-dra"
UPSTREAM_PKG = "test/integration/scheduler_perf/dra"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


class Binds:
    """Watches the namespace's pods and records when each was first seen bound.

    A watch, each event parsed once for two fields. Polling the whole list every quarter second,
    as this bench first did, cost O(pods) a poll: at 3,200 pods it used 32 CPU-s of a 93 s fill
    on the two cores the cluster shares (4 with the watch), and the fill ran at 34 claims/s
    instead of 42 (docs/dra.md)."""

    def __init__(self, core: Any) -> None:
        self.bound: dict[str, float] = {}
        self.lock = threading.Lock()
        self.core = core
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _catch_up(self) -> str:
        """Records every pod bound now; the resource version to watch from."""
        listed = kubeapi.plain_json(self.core.list_namespaced_pod, NS)
        now = time.monotonic()
        with self.lock:
            for p in listed.get("items") or []:
                if (p.get("spec") or {}).get("nodeName"):
                    self.bound.setdefault(p["metadata"]["name"], now)
        return str(listed["metadata"]["resourceVersion"])

    def _run(self) -> None:
        rv = self._catch_up()
        while not self.stop:
            try:
                rv = self._watch(rv)
            except (urllib3.exceptions.HTTPError, ApiException):
                if self.stop:  # the cluster is going down
                    return
                rv = self._catch_up()  # a dropped stream: what it missed, then watch again

    def _watch(self, rv: str) -> str:
        resp = self.core.list_namespaced_pod(NS, watch=True, resource_version=rv, allow_watch_bookmarks=True,
                                             timeout_seconds=60, _preload_content=False)
        try:
            for line in resp:
                if not line.strip():
                    continue
                ev = json.loads(line)
                obj = ev.get("object") or {}
                if ev.get("type") == "ERROR":  # expired: a list catches up, then watch from there
                    return self._catch_up()
                rv = obj["metadata"]["resourceVersion"]
                if (obj.get("spec") or {}).get("nodeName"):
                    with self.lock:
                        self.bound.setdefault(obj["metadata"]["name"], time.monotonic())
        finally:
            resp.release_conn()
        return rv

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


def _cpu_s(c: SimCluster) -> dict[str, float]:
    """CPU seconds (user + system) each of the cluster's processes and this one have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pidfile in sorted(c.layout.pids.glob("*.pid")):
        rec = procs.read(pidfile)
        try:
            fields = Path(f"/proc/{rec.pid}/stat").read_text().rsplit(")", 1)[1].split() if rec else []
        except OSError:
            continue  # exited since: its share is not counted
        if fields:
            out[pidfile.stem] = (int(fields[11]) + int(fields[12])) / tick
    t = os.times()
    out["bench (this process)"] = t.user + t.system
    return out


def _cpu_line(before: dict[str, float], after: dict[str, float], wall: float) -> str:
    used = {k: after[k] - before.get(k, 0.0) for k in after}
    top = sorted(used.items(), key=lambda kv: -kv[1])
    return (f"cpu_s over {wall:.1f}s (2 cores = {2 * wall:.0f} cpu-s): "
            + " ".join(f"{k}={v:.1f}" for k, v in top if v >= 0.05) + f" total={sum(used.values()):.1f}")


def upstream_fill(workload: str) -> tuple[int, float, float]:
    """kube-scheduler's own DRA throughput on this machine: ``workload`` (``TestCase/workload``) of
    upstream's scheduler_perf DRA benchmarks, run by their test binary built from the pinned
    Kubernetes release (toolchain group ``scheduler-perf-dra``; an API server and the scheduler in
    one process on etcd, pods created by the benchmark, no kubelet). Returns the pods it measured,
    its SchedulingDuration and its SchedulingThroughput/Average."""
    case, name = workload.split("/", 1)
    binary = build.ensure("scheduler-perf-dra", progress=lambda m: print(m, flush=True))
    etcd = build.ensure("etcd")
    pkg = build.module_dir("k8s.io/kubernetes", build.group_of("scheduler-perf-dra").version) / UPSTREAM_PKG
    measured = None
    for tc in yaml.safe_load((pkg / "performance-config.yaml").read_text()):
        for w in tc["workloads"] if tc["name"] == case else []:
            if w["name"] == name:
                measured = int(w["params"]["measurePods"])
    if measured is None:
        raise SystemExit(f"{workload}: no such workload in {pkg / 'performance-config.yaml'}")
    with tempfile.TemporaryDirectory() as out:
        proc = executor.run([binary, "-test.run=^$", f"-test.bench=^BenchmarkPerfScheduling$/^{case}$/^{name}$",
                             "-test.benchtime=1x", "-test.timeout=30m", "-data-items-dir", out,
                             "-perf-scheduling-label-filter="], cwd=pkg,
                            env={"PATH": f"{etcd.parent}{os.pathsep}{os.environ.get('PATH', '')}"})
    for line in proc.stdout.splitlines():
        if line.startswith(f"BenchmarkPerfScheduling/{workload}"):
            fields = line.split()[2:]
            metrics = {unit: float(value) for value, unit in zip(fields[::2], fields[1::2], strict=True)}
            return measured, metrics["SchedulingDuration/Duration"], metrics["SchedulingThroughput/Average"]
    raise SystemExit(f"scheduler_perf printed no result for {workload}:\n{proc.stdout[-2000:]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--claims-per-gpu", type=int, default=4, help="shares per GPU (shared mode)")
    ap.add_argument("--mode", choices=("shared", "exclusive"), default="shared",
                    help="shared: GPUs published with consumable memory, claims of 1/K of it; exclusive: one "
                         "whole-GPU claim per GPU (the shape of scheduler_perf's SchedulingWithResourceClaimTemplate)")
    ap.add_argument("--rounds", type=int, default=5, help="churn rounds")
    ap.add_argument("--churn", type=float, default=0.1, help="fraction of the pods replaced per round")
    ap.add_argument("--upstream", metavar="CASE/WORKLOAD", nargs="?", const="SchedulingWithResourceClaimTemplate/2000pods_100nodes",
                    help="first run this workload of kube-scheduler's own scheduler_perf DRA benchmarks on this "
                         "machine (default: %(const)s) and print the fill's ratio to it")
    args = ap.parse_args()
    upstream = None
    if args.upstream:
        upstream = upstream_fill(args.upstream)
        pods, seconds, avg = upstream
        print(f"upstream scheduler_perf {args.upstream}: {pods} pods in {seconds:.1f}s "
              f"upstream_claims_per_s={pods / seconds:.1f} (its SchedulingThroughput/Average {avg:.1f})", flush=True)
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
            drapublisher.reconcile(custom, node, dra.slice_specs(node, shape, gpus, args.mode))
        print(f"cluster of {len(nodes)} nodes up and published in {time.monotonic() - t_up:.0f}s", flush=True)
        core.create_namespace({"metadata": {"name": NS}})
        while not core.list_namespaced_service_account(NS).items:  # pods are refused until it exists
            time.sleep(0.2)
        if args.mode == "shared":
            per_gpu = args.claims_per_gpu
            share = f"{shape.gpu.memory_mib // per_gpu}Mi"
            request = dra_workspace.shared_request(share)
        else:
            per_gpu, share, request = 1, "a whole GPU", dra_workspace.whole_request()
        custom.create_namespaced_custom_object("resource.k8s.io", "v1", NS, "resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "share"},
            "spec": {"spec": dra_workspace.claim_spec(request)}})
        binds = Binds(core)
        total = len(nodes) * shape.gpu.count * per_gpu
        names = [f"p{i:05d}" for i in range(total)]
        created: dict[str, float] = {}
        cpu0 = _cpu_s(c)
        t0 = time.monotonic()
        _create(core, names, created)
        binds.wait(names, 60 + total * 0.5)
        fill = [binds.bound[n] - created[n] for n in names]
        fill_s = max(binds.bound[n] for n in names) - t0
        rss = _rss_mib(c)
        cpu_fill = _cpu_line(cpu0, _cpu_s(c), time.monotonic() - t0)
        print(f"fill: {total} claims ({share} each, {per_gpu} per GPU, {args.mode}) in {fill_s:.1f}s "
              f"fill_claims_per_s={total / fill_s:.1f} fill_latency_p50_s={_pct(fill, 0.5):.2f} "
              f"fill_latency_p95_s={_pct(fill, 0.95):.2f}", flush=True)
        print("rss_mib " + " ".join(f"{k}={v:.0f}" for k, v in rss.items()) + f" total={sum(rss.values()):.0f}",
              flush=True)
        print(cpu_fill, flush=True)
        if upstream:
            print(f"fill_vs_upstream={total / fill_s / (upstream[0] / upstream[1]):.2f} "
                  "(claims/s here over scheduler_perf's pods/s)", flush=True)
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
