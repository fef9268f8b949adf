"""Start steps both Slurm clusters share: the sim's host processes (:mod:`.cluster`) and the
daemons of a Slurm pod on kind (:mod:`gpucatalog.clusters.kind.slurmpod`).

- :func:`wait`: poll a probe while every daemon started so far still runs;
- :func:`start_accounting`: MariaDB, slurmdbd with a fresh database password, the cluster added;
- :func:`node_states` and :func:`unusable`: what ``sinfo`` says of each Slurm node.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping

from gpucatalog.clusters.slurm import config, mariadb
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.clusters.slurm.processes import Supervisor, log_tail
from gpucatalog.core import errors, executor


def wait(sup: Supervisor, what: str, probe: Callable[[], bool], timeout: float, interval: float = 0.05) -> None:
    """Until ``probe()`` is true; a daemon that exits ends the wait at once (``sup.check``), and
    the timeout names ``what`` with the end of the last daemon's log."""
    deadline = time.monotonic() + timeout
    while not probe():
        sup.check()
        if time.monotonic() > deadline:
            tail = ""
            if sup.daemons:
                last = sup.daemons[-1]
                tail = f"; end of {last.log}:\n{log_tail(last.log)}"
            raise errors.ToolError(["slurm start"], 124, f"timed out after {timeout:.0f}s waiting for {what}{tail}")
        time.sleep(interval)


def start_accounting(sup: Supervisor, layout: Layout, ports: config.Ports, cluster: str, timeout: float,
                     net: config.Network = config.LOOPBACK) -> dict[str, float]:
    """MariaDB, then slurmdbd, then ``cluster`` added to the accounting database, all before
    slurmctld starts. The database password is made here and written only into slurmdbd.conf,
    readable by root alone. Returns each step's seconds."""
    t = time.monotonic()
    password = secrets.token_hex(12)
    mariadb.start(sup, layout, ports.mysql, password, timeout)
    timings = {"mariadb": time.monotonic() - t}
    t = time.monotonic()
    conf = layout.slurmdbd_conf
    conf.write_text(config.slurmdbd_conf(layout, ports, mariadb.DB_USER, password, net))
    conf.chmod(0o600)  # slurmdbd refuses a readable file holding the password
    sup.start("slurmdbd", ["slurmdbd", "-D"], layout.log / "slurmdbd.out")
    env = {"SLURM_CONF": str(layout.slurm_conf)}

    def cluster_added() -> bool:
        res = executor.run(["sacctmgr", "-i", "add", "cluster", cluster], env=env, check=False, timeout=30)
        return res.returncode == 0 or "already exist" in res.stdout + res.stderr

    wait(sup, "slurmdbd to accept sacctmgr", cluster_added, timeout, interval=0.2)
    timings["slurmdbd"] = time.monotonic() - t
    return timings


def node_states(env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """(Slurm node -> its state, as ``sinfo -N`` prints it) and, when sinfo failed, the last line
    of its error ("" when it answered)."""
    res = executor.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=dict(env), check=False, timeout=30)
    rows = (line.split() for line in res.stdout.splitlines())
    states = {row[0]: row[1] for row in rows if len(row) == 2}
    error = (res.stderr.strip().splitlines() or ["sinfo failed"])[-1] if res.returncode else ""
    return states, error


def unusable(states: Mapping[str, str]) -> list[str]:
    """The nodes that registered invalid or drained: a start that ends with one of them failed."""
    return sorted(n for n, s in states.items() if s.startswith(("inval", "drain")))
