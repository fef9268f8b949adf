"""Generate ``slurm.conf``, ``gres.conf`` and ``slurmdbd.conf`` for a local multiple-slurmd cluster.

Input is a :class:`~.spec.ClusterSpec` read from the bundle's rendered Slinky CRs, so the
controller's shipped ``extraConf`` (GresTypes, preemption, partitions, accounting limits) is used
verbatim. What the sim adds is only what Slinky's operator would add on Kubernetes (node
records, NodeSet lines, accounting endpoint) and what a single host needs (loopback ports, paths
under the state folder, munge socket, no cgroups). Called by :mod:`.cluster`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpucatalog.clusters.slurm import spec as spec_mod
from gpucatalog.clusters.slurm.layout import Layout

# Keys the sim must own: paths, ports, auth and the process model of one host. A shipped
# extraConf line setting one of these is left out (and named in a comment) rather than breaking
# the local cluster.
SIM_OWNED = frozenset(
    {
        "ClusterName", "SlurmctldHost", "SlurmctldPort", "SlurmdPort", "SlurmUser", "SlurmdUser",
        "AuthType", "AuthAltTypes", "CredType", "AuthInfo", "CommunicationParameters",
        "StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile",
        "SlurmctldLogFile", "SlurmdLogFile", "MailProg", "ProctrackType", "TaskPlugin",
        "AccountingStorageType", "AccountingStorageHost", "AccountingStoragePort", "AccountingStoragePass",
        "SlurmctldParameters", "SlurmdParameters", "PluginDir",
    }
)

# Defaults the shipped extraConf may override (a later line in the same file would otherwise
# be reported as a duplicate by Slurm).
DEFAULTS: dict[str, str] = {
    "JobAcctGatherType": "jobacct_gather/none",
    "MpiDefault": "none",
    "ReturnToService": "2",
    "SchedulerType": "sched/backfill",
    # 0: schedule a batch job at submit, not on the next 3 s pass; 22.05 default is 3.
    "SchedulerParameters": "batch_sched_delay=0",
    "SelectType": "select/cons_tres",
    "SelectTypeParameters": "CR_Core",
    "MessageTimeout": "10",
}

RECORD_KEYS = ("PartitionName", "NodeName", "NodeSet", "DownNodes", "SwitchName")


@dataclass(frozen=True)
class Ports:
    slurmctld: int
    slurmd: dict[str, int]  # node name -> port
    slurmdbd: int = 0
    mysql: int = 0


def standard_ports(nodes: Sequence[str] = ()) -> Ports:
    """Slurm's own port numbers (and MariaDB's), for daemons on hosts of their own: kind's pods."""
    return Ports(slurmctld=6817, slurmd=dict.fromkeys(nodes, 6818), slurmdbd=6819, mysql=3306)


@dataclass(frozen=True)
class Network:
    """Where the daemons listen. The default is one host on loopback (the sim); on kind each
    daemon runs on its own node's address (:mod:`gpucatalog.clusters.kind.slurm`)."""

    controller: tuple[str, str] = ("localhost", "127.0.0.1")  # slurmctld's and slurmdbd's (host, address)
    nodes: Mapping[str, str] = field(default_factory=dict)  # Slurm node -> its address; absent: loopback
    # every slurmd on a host of its own (kind's pods): one spool folder and pid file, no node name
    # in their paths (slurmstepd's socket path there must stay within 107 bytes)
    own_hosts: bool = False

    def node(self, name: str) -> tuple[str, str]:
        """(NodeHostname, NodeAddr) of Slurm node ``name``."""
        addr = self.nodes.get(name)
        return (name, addr) if addr else ("localhost", "127.0.0.1")


LOOPBACK = Network()


def _split_extra(lines: tuple[str, ...]) -> tuple[dict[str, str], list[str], list[str]]:
    """Shipped extraConf -> (single settings, record lines, dropped sim-owned keys)."""
    settings: dict[str, str] = {}
    records: list[str] = []
    dropped: list[str] = []
    for line in lines:
        key = line.split("=", 1)[0].strip()
        if key in RECORD_KEYS:
            records.append(line)
        elif key in SIM_OWNED:
            dropped.append(key)
        elif "=" in line:
            settings[key] = line.split("=", 1)[1].strip()
    return settings, records, dropped


def slurm_conf(spec: spec_mod.ClusterSpec, layout: Layout, ports: Ports, net: Network = LOOPBACK,
               munge_socket: Path | None = None) -> str:
    """``munge_socket``: where this file's reader finds munged, if not at ``layout``'s (a client
    on another host than the daemons)."""
    settings, records, dropped = _split_extra(spec.extra_conf)
    socket = munge_socket or layout.munge_socket
    ctld_host, ctld_addr = net.controller
    owned = {
        "ClusterName": spec.cluster_name,
        "SlurmctldHost": f"{ctld_host}({ctld_addr})",
        "SlurmctldPort": str(ports.slurmctld),
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        # cred_expire=30: a requeued job is held cred_expire+1 s before it may start again.
        "AuthInfo": f"socket={socket},cred_expire=30",
        "CommunicationParameters": "NoCtldInAddrAny,NoInAddrAny",
        "StateSaveLocation": str(layout.state),
        "SlurmdSpoolDir": str(layout.spool if net.own_hosts else layout.spool / "%n"),
        "SlurmctldPidFile": str(layout.run / "slurmctld.pid"),
        "SlurmdPidFile": str(layout.run / ("slurmd.pid" if net.own_hosts else "slurmd-%n.pid")),
        "SlurmctldLogFile": str(layout.log / "slurmctld.log"),
        "SlurmdLogFile": str(layout.log / "slurmd-%n.log"),
        "MailProg": "/bin/true",
        # One host, many slurmd, no cgroup delegation: track processes by parentage only.
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        # Sim nodes declare more cores than the host has.
        "SlurmdParameters": "config_overrides",
    }
    if spec.accounting:
        owned["AccountingStorageType"] = "accounting_storage/slurmdbd"
        owned["AccountingStorageHost"] = ctld_addr
        owned["AccountingStoragePort"] = str(ports.slurmdbd)
        # For auth/munge this "password" is the munge socket used towards slurmdbd.
        owned["AccountingStoragePass"] = str(socket)
    else:
        owned["AccountingStorageType"] = "accounting_storage/none"
    out = ["# Generated by gpu-catalog from the slurm bundle's rendered Slinky CRs. Do not edit."]
    out += [f"{k}={v}" for k, v in owned.items()]
    out += [f"{k}={v}" for k, v in DEFAULTS.items() if k not in settings]
    if dropped:
        out.append("# shipped extraConf keys owned by the local sim and left out: " + ", ".join(sorted(set(dropped))))
    out.append("# --- controller extraConf (as shipped) ---")
    out += [f"{k}={v}" for k, v in settings.items()]
    out.append("# --- nodes: what Slinky's operator registers for each NodeSet ---")
    for ns in spec.nodesets:
        for node in ns.node_names():
            hostname, addr = net.node(node)
            out.append(
                f"NodeName={node} NodeHostname={hostname} NodeAddr={addr} Port={ports.slurmd[node]} "
                f"Sockets=1 CoresPerSocket={ns.cpus} ThreadsPerCore=1 RealMemory={ns.memory_mb} "
                f"Gres=gpu:{ns.gpu_type}:{ns.gpus} Feature={ns.name} State=UNKNOWN"
            )
        out.append(f"NodeSet={ns.name} Feature={ns.name}")
    out.append("# --- records from controller extraConf (partitions) ---")
    out += records
    return "\n".join(out) + "\n"


def gres_conf(spec: spec_mod.ClusterSpec, layout: Layout) -> str:
    """GPUs backed by character devices under ``<state>/dev`` (22.05 drops file-less GPUs)."""
    out = ["# Generated by gpu-catalog: fake GPUs, one mknod character device per GPU index."]
    for ns in spec.nodesets:
        files = str(layout.dev / f"nvidia[0-{ns.gpus - 1}]") if ns.gpus > 1 else str(layout.dev / "nvidia0")
        for node in ns.node_names():
            out.append(f"NodeName={node} Name=gpu Type={ns.gpu_type} File={files}")
    return "\n".join(out) + "\n"


def slurmdbd_conf(layout: Layout, ports: Ports, db_user: str, db_password: str, net: Network = LOOPBACK) -> str:
    dbd_host, dbd_addr = net.controller
    return "\n".join(
        [
            "# Generated by gpu-catalog: accounting daemon for the local Slurm cluster.",
            "AuthType=auth/munge",
            f"AuthInfo=socket={layout.munge_socket}",
            f"DbdHost={dbd_host}",
            f"DbdAddr={dbd_addr}",
            f"DbdPort={ports.slurmdbd}",
            "SlurmUser=root",
            f"LogFile={layout.log / 'slurmdbd.log'}",
            f"PidFile={layout.run / 'slurmdbd.pid'}",
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={ports.mysql}",
            f"StorageUser={db_user}",
            f"StoragePass={db_password}",
            "StorageLoc=slurm_acct_db",
        ]
    ) + "\n"
