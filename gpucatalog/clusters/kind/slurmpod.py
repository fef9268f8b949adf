"""What a Slurm pod on kind runs (``python3 -m gpucatalog.clusters.kind.slurmpod``), in the image
:mod:`.images` builds from Debian's Slurm packages.

Slinky runs slurmctld and each slurmd in a pod of its own; on kind the provider (:mod:`.slurm`)
plays its operator and starts these pods, each on the host network of its node:

- ``controller``: munged, then MariaDB and slurmdbd when accounting is on (the database and its
  password never leave the pod), then slurmctld;
- ``node NAME``: munged, one character device per GPU (Slurm 22.05 drops a GPU without a file),
  then ``slurmd -N NAME``.

The node's Slurm configuration (slurm.conf, gres.conf) and munge key are the provider's, in two
host folders every Slurm pod mounts: ``CONF_DIR`` read-only, and ``MUNGE_DIR`` for the key and
munged's socket, which gpu-health's controller on the same node mounts to reach slurmctld. The
pod exits non-zero, with the end of the log, as soon as one of its daemons exits. Told to stop
(SIGTERM: a drain's eviction, a delete), it stops its daemons and exits 0; the node's folders stay.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gpucatalog.clusters.slurm import cleanup, config, devices, munge, startup
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.clusters.slurm.processes import Supervisor, log_tail
from gpucatalog.core import errors

ROOT = "/var/lib/gpu-catalog-slurm"  # the Slurm layout inside each pod (its munge/ is MUNGE_DIR)
CONF_DIR = "/etc/gpu-catalog-slurm"  # on each node: slurm.conf and gres.conf
MUNGE_DIR = "/run/gpu-catalog-slurm"  # on each node: munge.key and munged's socket
# each daemon's own start, MariaDB's first start included; the provider waits as long for the
# whole cluster, so a slow machine fails there, naming what it waited for
START_TIMEOUT = 300.0


def _prepare(lay: Layout) -> Supervisor:
    for folder in lay.folders():
        folder.mkdir(parents=True, exist_ok=True)
    for name in ("slurm.conf", "gres.conf"):
        shutil.copyfile(Path(CONF_DIR) / name, lay.etc / name)
    sup = Supervisor(lay, {"SLURM_CONF": str(lay.slurm_conf)})
    munge.start(sup, lay)
    startup.wait(sup, "munged's socket", lay.munge_socket.exists, START_TIMEOUT, interval=0.2)
    return sup


def controller(lay: Layout, host: str, addr: str, cluster: str, accounting: bool) -> Supervisor:
    sup = _prepare(lay)
    if accounting:
        startup.start_accounting(sup, lay, config.standard_ports(), cluster, START_TIMEOUT,
                                 config.Network(controller=(host, addr)))
    sup.start("slurmctld", ["slurmctld", "-D", "-i"], lay.log / "slurmctld.out")
    return sup


def node(lay: Layout, name: str, gpus: int) -> Supervisor:
    sup = _prepare(lay)
    devices.make_gpu_devices(lay.dev, gpus)
    sup.start(f"slurmd/{name}", ["slurmd", "-D", "-N", name], lay.log / f"slurmd-{name}.out")
    return sup


def _follow(sup: Supervisor) -> int:
    """Print the daemons' logs as they grow (the pod's log); return 1 when one of them exits."""
    offsets: dict[Path, int] = {}
    while True:
        for log in sorted(sup.layout.log.glob("*")):
            with log.open("rb") as fh:
                fh.seek(offsets.get(log, 0))
                chunk = fh.read()
                offsets[log] = fh.tell()
            for line in chunk.decode(errors="replace").splitlines():
                print(f"{log.name}: {line}", flush=True)
        dead = sup.dead()
        if dead:
            for d in dead:
                print(f"{d.name} exited ({d.proc.returncode}):\n{log_tail(d.log)}", file=sys.stderr, flush=True)
            return 1
        time.sleep(1)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="slurmpod", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="role", required=True)
    ctl = sub.add_parser("controller", help="munged, [MariaDB, slurmdbd,] slurmctld")
    ctl.add_argument("--host", required=True, help="SlurmctldHost's name (this node's)")
    ctl.add_argument("--addr", required=True, help="this node's address")
    ctl.add_argument("--cluster", required=True, help="ClusterName")
    ctl.add_argument("--accounting", action="store_true")
    nd = sub.add_parser("node", help="munged, slurmd")
    nd.add_argument("name", help="the Slurm node (its Kubernetes node's name)")
    nd.add_argument("--gpus", type=int, required=True)
    a = ap.parse_args(argv)
    lay = Layout(Path(ROOT))

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(0)

    # PID 1 of a container gets no default action for SIGTERM: without a handler an eviction
    # would wait out the grace period and then kill every process at once
    signal.signal(signal.SIGTERM, stop)
    try:
        sup = (controller(lay, a.host, a.addr, a.cluster, a.accounting) if a.role == "controller"
               else node(lay, a.name, a.gpus))
        return _follow(sup)
    except errors.CatalogError as exc:
        print(f"slurm pod: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        # the daemons (and any job step) go; the folders stay: munge/ is the node's own
        cleanup.kill_all(lay)
        print("slurm pod: daemons stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
