"""Host services a bundle brings to a sim cluster: a real Slurm cluster for Slinky CRs.

Called by ``SimCluster.start_services`` / ``endpoints`` / ``_teardown`` (:mod:`.cluster`) and by
:mod:`.parts` for the evidence. Slinky ``Controller`` + ``NodeSet`` objects (the ``slurm``
bundle) get a real Slurm cluster (munged, slurmctld, one slurmd per NodeSet replica, slurmdbd +
MariaDB when the Controller references an Accounting CR) configured from those objects,
standing in for what Slinky's operator would run in pods. Its state lives in the cluster's
``slurm/`` folder, so :func:`stop` finds every daemon even after a crash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpucatalog.clusters.sim import relay
from gpucatalog.clusters.sim.layout import Layout
from gpucatalog.core import errors

# Slurm clusters started by start_slurm in this process, by cluster folder: their daemons are
# this process's children, so whichever SimCluster object tears the cluster down also reaps them.
_SLURM_CHILDREN: dict[str, Any] = {}


def start_slurm(lay: Layout, cluster_name: str, core: Any, objects: Sequence[Mapping[str, Any]],
                timeout: float) -> list[str]:
    """Start the Slurm cluster the rendered ``objects`` call for (none without a Slinky
    Controller); returns one line per service started. ``core``: a CoreV1Api of the cluster,
    whose nodes name the Slurm nodes (:mod:`..slurm.placement`)."""
    from gpucatalog.clusters import slurm
    from gpucatalog.clusters.slurm import placement

    if not any(str(o.get("apiVersion", "")).startswith(placement.SLINKY_GROUP + "/") and o.get("kind") == "Controller"
               for o in objects):
        return []
    if lay.slurm.exists():
        raise errors.ConflictError(f"sim cluster {cluster_name!r} already runs a Slurm cluster",
                                   expected="`catalog cluster down` first")
    nodes = [(str(n.metadata.name), dict(n.metadata.labels or {})) for n in core.list_node().items]
    spec = slurm.from_manifests(objects, node_names=placement.place(objects, nodes))
    cluster = slurm.SlurmCluster(spec, lay.slurm)
    cluster.start(timeout)
    _SLURM_CHILDREN[str(lay.root)] = cluster
    if cluster.ports is not None:
        # pods live in their own network namespaces: their Slurm clients (gpu-health's scontrol
        # hook) reach slurmctld and slurmdbd at 127.0.0.1 through the pod relays
        relay.write_host_ports(lay, {k: v for k, v in (("slurmctld", cluster.ports.slurmctld),
                                                       ("slurmdbd", cluster.ports.slurmdbd)) if v})
    t = cluster.timings.get("total", 0.0)
    return [f"Slurm {cluster.slurm_version()} cluster {spec.cluster_name!r}: slurmctld, "
            f"{len(cluster.node_names())} slurmd ({', '.join(cluster.node_names())})"
            + (", slurmdbd + MariaDB" if spec.accounting else "") + f", started in {t:.1f}s"]


def reconfigure_slurm(lay: Layout, core: Any, objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """Play Slinky's operator reconciling changed CRs (an upgrade): the Slurm cluster this process
    started takes the configuration the new ``objects`` call for; one line per change."""
    from gpucatalog.clusters import slurm
    from gpucatalog.clusters.slurm import placement

    cluster = _SLURM_CHILDREN.get(str(lay.root))
    if cluster is None:
        return []
    nodes = [(str(n.metadata.name), dict(n.metadata.labels or {})) for n in core.list_node().items]
    spec = slurm.from_manifests(objects, node_names=placement.place(objects, nodes))
    changed = cluster.reconfigure(spec)
    return [f"Slurm cluster {spec.cluster_name!r} reconfigured (scontrol reconfigure): "
            + (", ".join(changed) if changed else "no change")]


def stop(lay: Layout) -> None:
    """Every daemon, job and step of the cluster's Slurm cluster, found from its folder and the
    processes' environment alone (works after a crash; nothing to do without one); daemons
    started by this process are reaped too."""
    from gpucatalog.clusters import slurm

    started_here = _SLURM_CHILDREN.pop(str(lay.root), None)
    if started_here is not None:
        started_here.stop()
    slurm.stop_state_dir(lay.slurm)


def endpoints(lay: Layout) -> dict[str, str]:
    """``slurm_conf`` while a Slurm cluster runs."""
    return {"slurm_conf": str(lay.slurm_conf)} if lay.slurm_conf.is_file() else {}


def live_parts(lay: Layout) -> list[str]:
    if not lay.slurm_conf.is_file():
        return []
    return ["Slurm (Debian slurm-wlm): slurmctld, one slurmd per NodeSet replica named after its "
            "Kubernetes node, munged, slurmdbd + MariaDB when accounting is on; configured from the "
            "bundle's Slinky Controller/NodeSet CRs (the sim plays Slinky's operator)"]


def simulated_parts(lay: Layout) -> list[str]:
    if not lay.slurm_conf.is_file():
        return []
    return ["Slinky operator reconciliation (slurmctld/slurmd/slurmrestd pods from the CRs): not run; "
            "the sim starts the Slurm daemons on the host instead",
            "GPUs of Slurm nodes: character devices made with mknod, one per GPU"]
