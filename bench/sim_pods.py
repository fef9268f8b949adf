"""Benchmark: how fast the sim kubelet starts real pods, and what each pod costs in memory.

Starts a sim cluster of 4 ``cpu`` nodes, then creates N bare ``demo-probe`` pods (bound to nodes
round-robin, so the scheduler is not measured) and prints:

* ``pods_per_s``: N / seconds from the first create to the last pod's program serving on its port
  (the sim kubelet's whole start path: volumes, network namespace, process, and the program's
  own start-up, which dominates);
* ``cpu_ms_per_pod``: CPU time the cluster's processes (and the helpers they ran) spent from
  before the pods to when all are Running and settled, per pod: the start cost that does not
  depend on how busy the machine is (``load1`` is printed for that reason);
* ``rss_mib_per_pod`` / ``pss_mib_per_pod``: growth of the resident (and proportional) memory of
  every process of the cluster (control plane, sim kubelet, egress/relays, pod processes and
  anything else a pod needs) from before the pods to when all serve, divided by N.

    PYTHONPATH=. python3 bench/sim_pods.py          # N = 50
    PYTHONPATH=. python3 bench/sim_pods.py 20 100
    PYTHONPATH=. python3 bench/sim_pods.py --busybox 50   # busybox pods running their own
        # command (echo, then sleep until deleted) on the sim's busybox root instead of demo-probe
"""

from __future__ import annotations

import os
import sys
import time

from gpucatalog.clusters.sim import SimCluster, procs

NODES = 4


def _sessions(c: SimCluster) -> set[int]:
    return {r.pid for r in procs.read_all(c.layout.pids) + procs.read_all_pods(c.layout.nodes)}


def settle(c: SimCluster) -> procs.Usage:
    time.sleep(3)
    return procs.usage(_sessions(c))


def serving(c: SimCluster, ns: str) -> int:
    """Pods whose demo-probe has bound its port (its log says so): started for real, not only
    reported Running (which the sim kubelet reports as soon as the process is spawned)."""
    return sum(1 for log in c.layout.nodes.glob(f"*/pods/{ns}_*/main.log") if b"listening on" in log.read_bytes())


BUSYBOX = False


def one(c: SimCluster, n: int, round_no: int) -> None:
    core = c.core()
    ns = f"bench-pods-{round_no}"
    core.create_namespace({"metadata": {"name": ns}})
    nodes = sorted(x.metadata.name for x in core.list_node().items)
    before = settle(c)
    t0 = time.monotonic()
    for i in range(n):
        # a port per pod: before per-pod network namespaces pods shared the host's ports, and the
        # figures compare with that
        container = {"name": "main", "image": "ghcr.io/gpu-catalog/demo-probe:0.1", "args": ["--port", str(10000 + i)]}
        if BUSYBOX:
            container = {"name": "main", "image": "busybox:1.36",
                         "command": ["sh", "-c", "echo listening on nothing; exec sleep infinity"]}
        core.create_namespaced_pod(ns, {"metadata": {"name": f"p{i:04d}"}, "spec": {
            "nodeName": nodes[i % len(nodes)], "automountServiceAccountToken": False, "containers": [container]}})
    deadline = t0 + 60 + 2.0 * n
    while serving(c, ns) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {serving(c, ns)}/{n} pods serving after {time.monotonic() - t0:.0f}s")
        time.sleep(0.1)
    secs = time.monotonic() - t0
    after = settle(c)
    rss = (after.rss - before.rss) / n / 2**20
    pss = (after.pss - before.pss) / n / 2**20
    cpu_ms = (after.cpu_s - before.cpu_s) / n * 1000
    print(f"pods={n:4d}  seconds={secs:6.2f}  pods_per_s={n / secs:6.2f}  cpu_ms_per_pod={cpu_ms:6.0f}  "
          f"rss_mib_per_pod={rss:6.1f}  pss_mib_per_pod={pss:6.1f}  load1={os.getloadavg()[0]:.1f}", flush=True)
    core.delete_namespace(ns)
    while any(p.metadata.namespace == ns for p in core.list_pod_for_all_namespaces().items):
        time.sleep(0.5)


def main() -> int:
    global BUSYBOX
    BUSYBOX = "--busybox" in sys.argv
    counts = [int(a) for a in sys.argv[1:] if a != "--busybox"] or [50]
    c = SimCluster("bench-pods")
    if c.layout.root.exists():
        c.down()
    c.up(NODES, "cpu", timeout=300)
    try:
        for i, n in enumerate(counts):
            one(c, n, i)
    finally:
        c.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
