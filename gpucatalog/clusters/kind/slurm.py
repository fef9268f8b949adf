"""Slurm on kind: the daemons a bundle's Slinky CRs call for, in pods on the cluster's nodes.

Slinky's operator cannot be built here (the module proxy refuses it, docs/slurm.md), so the kind
provider plays its part, as the sim does, but in real pods on real kubelets: from the rendered
``Controller`` and ``NodeSet`` objects it writes slurm.conf, gres.conf and a fresh munge key into
every node (:data:`.slurmpod.CONF_DIR`, :data:`.slurmpod.MUNGE_DIR`), then starts

- ``slurmctld`` on the control-plane node: munged, MariaDB and slurmdbd (when the Controller
  references an Accounting CR), slurmctld;
- ``slurmd-<node>`` on each GPU worker a NodeSet replica lands on (:mod:`..slurm.placement`),
  the Slurm node named after the Kubernetes node, as on the sim, so gpu-health drains the Slurm
  node of the node it quarantines.

Each pod runs on its node's host network: the daemons listen on the node's address, which the
host reaches over the engine's bridge. The suites' Slurm commands run on the host with their own
munged (same key) and a copy of slurm.conf naming its socket (``<state>/slurm``, the endpoint
``slurm_conf``). gpu-health's controller, on the control-plane node, mounts the node's two
folders (the bundle's kind profile: ``controller.slurm.hostPaths``).
"""

from __future__ import annotations

import io
import json
import secrets
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucatalog.clusters import slurm as local_slurm
from gpucatalog.clusters.kind import slurmpod
from gpucatalog.clusters.kind.config import SHAPE_LABEL
from gpucatalog.clusters.slurm import config as slurm_config
from gpucatalog.clusters.slurm import munge, placement
from gpucatalog.clusters.slurm import startup as local_startup
from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.clusters.slurm.processes import Supervisor
from gpucatalog.core import errors, executor

NAMESPACE = "gpu-catalog-slurm"
CONTROL_PLANE = "node-role.kubernetes.io/control-plane"
SOCKET_PATH_MAX = 107
NODE_LABEL = "slurm.gpu-catalog.dev/node"  # the Slurm node (= Kubernetes node) a Slurm pod serves

# host munged of each Slurm cluster started by this process, by state folder: reaped on stop
_HOST_MUNGED: dict[str, Supervisor] = {}


def wanted(objects: Sequence[Mapping[str, Any]]) -> bool:
    """True when the rendered ``objects`` hold a Slinky Controller (the ``slurm`` bundle)."""
    return any(str(o.get("apiVersion", "")).startswith(placement.SLINKY_GROUP + "/") and o.get("kind") == "Controller"
               for o in objects)


def host_layout(state: Path) -> Layout:
    """The host side of a kind cluster's Slurm: munged, the clients' slurm.conf."""
    return Layout((state / "slurm").resolve())


def _address(node: Any) -> str:
    for a in node.status.addresses or []:
        if a.type == "InternalIP":
            return str(a.address)
    raise errors.ToolError(["kind", "slurm"], 1, f"node {node.metadata.name} reports no InternalIP")


@dataclass(frozen=True)
class Plan:
    """The Slurm cluster a bundle's CRs call for, placed on a kind cluster's nodes."""

    spec: local_slurm.ClusterSpec
    plane: str  # the control-plane node: slurmctld's
    net: slurm_config.Network  # where each daemon listens

    @property
    def nodes(self) -> list[str]:
        """The Slurm nodes, each named after the Kubernetes node its slurmd runs on."""
        return [s for ns in self.spec.nodesets for s in ns.node_names()]


def plan(objects: Sequence[Mapping[str, Any]], nodes: Sequence[Any]) -> Plan:
    """Where the Slurm cluster of the rendered ``objects`` runs on kind ``nodes``; a NodeSet no
    worker fits is refused. A worker's shape label stands for the instance type the NodeSets'
    shape annotation names."""
    labelled = []
    for n in nodes:
        labels = dict(n.metadata.labels or {})
        if SHAPE_LABEL in labels:
            labels.setdefault(placement.INSTANCE_TYPE, labels[SHAPE_LABEL])
        labelled.append((str(n.metadata.name), labels))
    workers = [(name, labels) for name, labels in labelled if CONTROL_PLANE not in labels]
    planes = [name for name, labels in labelled if CONTROL_PLANE in labels]
    if not planes:
        raise errors.ToolError(["kind", "slurm"], 1, "the cluster has no control-plane node for slurmctld")
    spec = local_slurm.from_manifests(objects, node_names=placement.place(objects, workers))
    addr = {str(n.metadata.name): _address(n) for n in nodes}
    slurm_nodes = [s for ns in spec.nodesets for s in ns.node_names()]
    for node in slurm_nodes:
        # slurmstepd's socket for a batch step: <spool>/<node>_<job>.<step>; a unix socket path
        # holds 107 bytes, and a longer one fails every job's launch
        sock = f"{slurmpod.ROOT}/spool/{node}_{9999999}.{4294967291}"
        if len(sock) > SOCKET_PATH_MAX:
            raise errors.InputError(f"kind node name {node!r} is too long for Slurm's socket paths ({sock!r} is "
                                    f"{len(sock)} bytes, at most {SOCKET_PATH_MAX})", field="--cluster-name",
                                    expected=f"a name at least {len(sock) - SOCKET_PATH_MAX} characters shorter")
    return Plan(spec, planes[0], slurm_config.Network(controller=(planes[0], addr[planes[0]]),
                                                      nodes={s: addr[s] for s in slurm_nodes}, own_hosts=True))


def node_files(conf: str, gres: str, key: bytes) -> bytes:
    """A tar stream of what every node holds: the configuration and the munge key (root's only)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for folder in (slurmpod.CONF_DIR, slurmpod.MUNGE_DIR):
            info = tarfile.TarInfo(folder.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data, mode in ((f"{slurmpod.CONF_DIR}/slurm.conf", conf.encode(), 0o644),
                                 (f"{slurmpod.CONF_DIR}/gres.conf", gres.encode(), 0o644),
                                 (f"{slurmpod.MUNGE_DIR}/munge.key", key, 0o400)):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _pod_spec(component: str, image: str, args: list[str]) -> dict[str, Any]:
    return {
        "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet", "automountServiceAccountToken": False,
        "containers": [{
            "name": component, "image": image, "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-m", "gpucatalog.clusters.kind.slurmpod", *args],
            # root: SlurmUser; CAP_MKNOD (in the runtime's default set) for the GPU device files
            "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": False},
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
            "volumeMounts": [{"name": "conf", "mountPath": slurmpod.CONF_DIR, "readOnly": True},
                             {"name": "munge", "mountPath": f"{slurmpod.ROOT}/munge"}]}],
        "volumes": [{"name": "conf", "hostPath": {"path": slurmpod.CONF_DIR, "type": "Directory"}},
                    {"name": "munge", "hostPath": {"path": slurmpod.MUNGE_DIR, "type": "Directory"}}]}


def _labels(component: str, node: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "slurm", "app.kubernetes.io/component": component, NODE_LABEL: node}


def manifests(p: Plan, image: str) -> list[dict[str, Any]]:
    """The namespace; slurmctld's pod, pinned to the control-plane node, which gpu-health never
    drains; and one StatefulSet of one slurmd per Slurm node, on that node, as Slinky's NodeSet
    keeps its pods: a slurmd evicted by a drain comes back once the node is schedulable again."""
    spec, plane = p.spec, p.plane
    host, addr = p.net.controller
    ctl = ["controller", "--host", host, "--addr", addr, "--cluster", spec.cluster_name]
    ctld_spec = {**_pod_spec("slurmctld", image, ctl + (["--accounting"] if spec.accounting else [])),
                 "nodeName": plane, "restartPolicy": "Never", "tolerations": [{"operator": "Exists"}]}
    items: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Pod", "spec": ctld_spec,
         "metadata": {"name": "slurmctld", "namespace": NAMESPACE, "labels": _labels("slurmctld", plane)}}]
    for ns in spec.nodesets:
        for i, node in enumerate(ns.node_names()):
            labels = _labels("slurmd", node)
            # no toleration: a cordoned node takes its slurmd back only once uncordoned
            pod = {**_pod_spec("slurmd", image, ["node", node, "--gpus", str(ns.gpus)]),
                   "nodeSelector": {"kubernetes.io/hostname": node}}
            items.append({"apiVersion": "apps/v1", "kind": "StatefulSet",
                          "metadata": {"name": f"slurmd-{ns.name}-{i}", "namespace": NAMESPACE, "labels": labels},
                          "spec": {"replicas": 1, "serviceName": "slurmd", "selector": {"matchLabels": labels},
                                   "template": {"metadata": {"labels": labels}, "spec": pod}}})
    return items


def start(p: Plan, core: Any, kubectl: Path, kubeconfig: Path, state: Path, image: str, env: dict[str, str],
          timeout: float = slurmpod.START_TIMEOUT) -> list[str]:
    """Start the Slurm cluster ``p`` (from :func:`plan`); one line saying what runs where. On
    failure everything of it on the host is stopped (the pods go with the cluster)."""
    t0 = time.monotonic()
    spec, nodes = p.spec, p.nodes
    pod_lay = Layout(Path(slurmpod.ROOT))
    ports = slurm_config.standard_ports(nodes)
    key = secrets.token_bytes(1024)
    files = node_files(slurm_config.slurm_conf(spec, pod_lay, ports, p.net), slurm_config.gres_conf(spec, pod_lay), key)
    lay = host_layout(state)
    if lay.pids.exists():
        raise errors.ConflictError(f"kind cluster state {state} already runs a Slurm cluster",
                                   expected="`catalog cluster down` first")
    if len(str(lay.munge_socket)) > SOCKET_PATH_MAX:
        raise errors.InputError(f"the host's munged socket {lay.munge_socket} would be {len(str(lay.munge_socket))} "
                                f"bytes, more than a unix socket path holds ({SOCKET_PATH_MAX})",
                                field="GPU_CATALOG_CACHE", expected="a shorter cache folder or cluster name")
    try:
        for node in [p.plane, *nodes]:
            executor.run(["docker", "exec", "-i", node, "tar", "-x", "-C", "/"], input=files, env=env, timeout=60,
                         text=False)
        # the host's clients: their own munged with the cluster's key, and slurm.conf naming it
        for folder in (lay.etc, lay.log, lay.munge):
            folder.mkdir(parents=True, exist_ok=True)
        keyfile = lay.munge / "munge.key"
        keyfile.write_bytes(key)
        keyfile.chmod(0o400)
        lay.slurm_conf.write_text(slurm_config.slurm_conf(spec, pod_lay, ports, p.net, munge_socket=lay.munge_socket))
        sup = Supervisor(lay, {"SLURM_CONF": str(lay.slurm_conf)})
        _HOST_MUNGED[str(lay.root)] = sup
        munge.start(sup, lay)
        executor.run([kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-"],
                     input=json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests(p, image)}),
                     timeout=120)
        _wait_idle(core, lay, sup, nodes, timeout)
    except BaseException:
        stop(state)
        raise
    return [f"Slurm {_version(lay)} cluster {spec.cluster_name!r} in pods: slurmctld on {p.plane}"
            + (" with slurmdbd + MariaDB" if spec.accounting else "")
            + f", {len(nodes)} slurmd ({', '.join(nodes)}), idle {time.monotonic() - t0:.1f}s after the start"]


def _version(lay: Layout) -> str:
    out = executor.run(["sinfo", "-V"], env={"SLURM_CONF": str(lay.slurm_conf)}, check=False, timeout=30).stdout
    return out.split()[-1] if out.split() else "?"


def _wait_idle(core: Any, lay: Layout, sup: Supervisor, nodes: Sequence[str], timeout: float) -> None:
    """Until ``sinfo`` on the host shows every Slurm node idle; a Slurm pod that failed, the
    host's munged exiting, or a node that registered invalid ends the wait at once with its cause."""
    env = {"SLURM_CONF": str(lay.slurm_conf)}
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        sup.check()
        for pod in core.list_namespaced_pod(NAMESPACE).items:
            restarted = any((c.restart_count or 0) > 0 for c in pod.status.container_statuses or [])
            if pod.status.phase in ("Failed", "Succeeded") or restarted:
                log = core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE, tail_lines=20, previous=restarted)
                raise errors.ToolError(["kind", "slurm"], 1, f"Slurm pod {pod.metadata.name} exited:\n{log}")
        states, error = local_startup.node_states(env)
        bad = local_startup.unusable(states)
        if bad:
            raise errors.ToolError(["kind", "slurm"], 1, f"Slurm nodes {bad} registered invalid: {states}")
        if sorted(states) == sorted(nodes) and all(s == "idle" for s in states.values()):
            return
        last = error or f"states {states}"
        time.sleep(1)
    raise errors.ToolError(["kind", "slurm"], 124, f"Slurm nodes not idle after {timeout:.0f}s: {last}")


def stop(state: Path) -> None:
    """The host's part of the cluster's Slurm (its munged), also after a crash; the pods are the
    cluster's and go with it."""
    lay = host_layout(state)
    sup = _HOST_MUNGED.pop(str(lay.root), None)
    local_slurm.stop_state_dir(lay.root)
    if sup is not None:
        sup.reap()


def endpoints(state: Path) -> dict[str, str]:
    lay = host_layout(state)
    return {"slurm_conf": str(lay.slurm_conf)} if lay.slurm_conf.is_file() else {}


def running(state: Path) -> bool:
    return host_layout(state).slurm_conf.is_file()
