"""A real local Slurm cluster: munged, (MariaDB + slurmdbd), one slurmctld, one slurmd per node.

Debian 12's slurm-wlm 22.05 is built with ``--enable-multiple-slurmd``, so every simulated
Slurm node is its own ``slurmd -N <node>`` on its own loopback port. Configuration comes from
the bundle's rendered Slinky CRs (:mod:`.spec`, :mod:`.config`). Called by the sim provider,
the certify pipeline, tests and ``bench/slurm_*.py``::

    spec = slurm.from_manifests(rendered_slurm_chart_objects)
    cluster = slurm.SlurmCluster(spec, state_dir)
    cluster.start()                  # returns when every node is idle
    ctx.endpoints.update(cluster.endpoints())   # {"slurm_conf": ".../etc/slurm.conf"}
    cluster.stop()                   # kills every Slurm process, removes state_dir
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpucatalog.clusters.slurm import cleanup, config, devices, munge, ports, startup
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.clusters.slurm.processes import Supervisor, log_tail
from gpucatalog.clusters.slurm.spec import ClusterSpec
from gpucatalog.core import errors, executor


class SlurmCluster:
    def __init__(self, spec: ClusterSpec, state_dir: Path) -> None:
        self.spec = spec
        self.layout = Layout(Path(state_dir).resolve())
        self.env = {"SLURM_CONF": str(self.layout.slurm_conf)}
        self.sup = Supervisor(self.layout, self.env)
        self.ports: config.Ports | None = None
        self.timings: dict[str, float] = {}

    # -- public API -------------------------------------------------------------------------

    def endpoints(self) -> dict[str, str]:
        return {"slurm_conf": str(self.layout.slurm_conf)}

    def node_names(self) -> list[str]:
        return [n for ns in self.spec.nodesets for n in ns.node_names()]

    def start(self, timeout: float = 120.0) -> None:
        """Write the configuration, start every daemon, return once all nodes are idle.

        On any failure everything started so far is killed and the state folder removed.
        """
        if self.layout.pids.exists():
            raise errors.ConflictError(f"a Slurm cluster already uses {self.layout.root}; stop it first")
        t0 = time.monotonic()
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0

    def stop(self) -> None:
        """Kill every process of this cluster (jobs included) and remove its state folder."""
        cleanup.remove(self.layout)
        self.sup.reap()

    def reconfigure(self, spec: ClusterSpec) -> list[str]:
        """Apply a new version of the configuration to the running cluster, as Slinky's operator
        does when its CRs change: rewrite slurm.conf and gres.conf (same nodes, same ports) and
        ``scontrol reconfigure``; jobs keep running. Returns the slurm.conf lines that changed.
        A change of nodes (NodeSets, replicas, GPUs) is refused: it needs new slurmd daemons."""
        if self.ports is None:
            raise errors.ConflictError("the Slurm cluster is not running; start it first")
        if [(ns.name, ns.node_names(), ns.gpus) for ns in spec.nodesets] != \
                [(ns.name, ns.node_names(), ns.gpus) for ns in self.spec.nodesets]:
            raise errors.InputError("a reconfiguration cannot change Slurm's nodes (NodeSets, replicas, GPUs)",
                                    field="NodeSet")
        old = self.layout.slurm_conf.read_text().splitlines()
        self.spec = spec
        self.layout.slurm_conf.write_text(config.slurm_conf(spec, self.layout, self.ports))
        self.layout.gres_conf.write_text(config.gres_conf(spec, self.layout))
        executor.run(["scontrol", "reconfigure"], env=self.env, timeout=60)
        self._wait("slurmctld to answer ping after reconfigure", self._ctld_up, 60)
        new = self.layout.slurm_conf.read_text().splitlines()
        return [f"+{line}" for line in new if line not in old] + [f"-{line}" for line in old if line not in new]

    def slurm_version(self) -> str:
        out = executor.run(["slurmctld", "-V"], env=self.env).stdout.strip()
        return out.split()[-1]

    # -- steps ------------------------------------------------------------------------------

    def _start(self, timeout: float) -> None:
        t = time.monotonic()
        lay = self.layout
        for folder in lay.folders():
            folder.mkdir(parents=True, exist_ok=True)
        nodes = self.node_names()
        free = ports.free_ports(len(nodes) + 3)
        self.ports = config.Ports(
            slurmctld=free[0], slurmdbd=free[1], mysql=free[2],
            slurmd=dict(zip(nodes, free[3:], strict=True)),
        )
        devices.make_gpu_devices(lay.dev, max(ns.gpus for ns in self.spec.nodesets))
        for node in nodes:
            (lay.spool / node).mkdir(exist_ok=True)
        lay.slurm_conf.write_text(config.slurm_conf(self.spec, lay, self.ports))
        lay.gres_conf.write_text(config.gres_conf(self.spec, lay))
        munge.start(self.sup, lay)
        self._wait("munged socket", lambda: lay.munge_socket.exists(), 20)
        if self.spec.accounting:
            self.timings.update(startup.start_accounting(self.sup, lay, self.ports, self.spec.cluster_name, timeout))
        self.timings["prepare"] = time.monotonic() - t
        t = time.monotonic()
        self.sup.start("slurmctld", ["slurmctld", "-D", "-i"], lay.log / "slurmctld.out")
        self._wait("slurmctld to answer ping", self._ctld_up, timeout)
        self.timings["slurmctld"] = time.monotonic() - t
        t = time.monotonic()
        for node in nodes:
            self.sup.start(f"slurmd/{node}", ["slurmd", "-D", "-N", node], lay.log / f"slurmd-{node}.out")
        self._wait(f"{len(nodes)} Slurm nodes to be idle", self._all_idle, timeout)
        self.timings["slurmd"] = time.monotonic() - t

    def _ctld_up(self) -> bool:
        res = executor.run(["scontrol", "ping"], env=self.env, check=False, timeout=30)
        return "UP" in res.stdout

    def _all_idle(self) -> bool:
        states, _error = startup.node_states(self.env)
        bad = startup.unusable(states)
        if bad:
            raise errors.ToolError(["slurmd"], 1, f"nodes {bad} registered invalid:\n" + log_tail(self.layout.log / "slurmctld.log"))
        return sorted(states) == sorted(self.node_names()) and all(s == "idle" for s in states.values())

    def _wait(self, what: str, probe: Callable[[], bool], timeout: float) -> None:
        startup.wait(self.sup, what, probe, timeout)
