"""What a sim-kubelet container process is started with: its volumes, mounts and environment.

Called by the sim kubelet (:mod:`.kubelet`) when it starts a pod: :meth:`Builder.prepare` does
the per-pod work once (a token for the pod's ServiceAccount through the TokenRequest API, bound
to the pod, with the ServiceAccount files and a kubeconfig using it; every volume materialised
under the pod folder), :meth:`Builder.container_spec` gives one container's launch spec for
:mod:`.podexec` (argv, env, working directory, mounts, pod root).

* hostPath volumes map to ``<node folder>/<path>`` (so a DaemonSet pod on node X reads node
  X's simulated ``/dev/kmsg``, sysfs and ``nvidia-smi``);
* ConfigMap, Secret, projected (token, ConfigMap, Secret, downward API) and emptyDir volumes
  are written under ``<pod folder>/volumes/<name>``, the first three atomically (:mod:`.atomicdir`)
  and again by :meth:`Builder.refresh` when their objects change;
* a mount with ``subPath`` (or ``subPathExpr``, ``$(VAR)``-expanded) mounts that file or folder of
  the volume (a ConfigMap key as a single file, say);
* env comes from the pod spec (``value`` with ``$(VAR)`` expansion, ``envFrom``, field,
  ConfigMap and Secret key refs) over the variables a kubelet and the image would set;
* the container's own ``command`` and ``args`` are ``$(VAR)``-expanded with that env, as a
  kubelet does (the image map's host prefix is not: it stands for the image's ENTRYPOINT).
"""

from __future__ import annotations

import base64
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucatalog.clusters.sim import atomicdir, egress, netns
from gpucatalog.clusters.sim import pki as pki_mod
from gpucatalog.clusters.sim.config import ClusterConfig
from gpucatalog.clusters.sim.layout import Layout
from gpucatalog.core import errors

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class PodPlace:
    """Where a pod runs: its node, its pod IP (as the API sees it), its folder on the host and
    its network namespace (None: ``hostNetwork``, on the host at the IP's loopback alias)."""

    node: str
    ip: str
    dir: Path
    net: netns.PodNet | None = None

    def bind_ip(self, slot: int) -> str:
        """The address the pod's processes can bind and others reach them at."""
        return self.ip if self.net is not None else egress.loopback_of(self.ip, slot)


@dataclass(frozen=True)
class Prepared:
    """What every container of one pod shares: its volumes and ServiceAccount credentials."""

    volumes: dict[str, Path]
    token: str | None
    kubeconfig: Path | None


class Builder:
    """Builds pod volumes and container specs from the API objects a pod names."""

    def __init__(self, core: Any, client: Any, lay: Layout, cfg: ClusterConfig, ca: str) -> None:
        self.core = core  # CoreV1Api of the sim kubelet
        self.client = client  # the kubernetes.client module (for ApiException)
        self.lay = lay
        self.cfg = cfg
        self.ca = ca

    # -- per pod ------------------------------------------------------------------------------
    def prepare(self, pod: Any, place: PodPlace) -> Prepared:
        """ServiceAccount files and kubeconfig (when the pod mounts a token) and every volume."""
        token = None
        kubeconfig = None
        if pod.spec.automount_service_account_token is not False or any(
            s.service_account_token for v in pod.spec.volumes or [] if v.projected for s in v.projected.sources or []
        ):
            ns = pod.metadata.namespace
            token = self._token(pod)
            sa_dir = place.dir / "serviceaccount"
            sa_dir.mkdir()
            (sa_dir / "token").write_text(token)
            (sa_dir / "ca.crt").write_text(self.ca)
            (sa_dir / "namespace").write_text(ns)
            kubeconfig = pki_mod.write_kubeconfig(place.dir / "kubeconfig", pki_mod.kubeconfig_doc(
                self.cfg.api_url, sa_dir / "ca.crt", token_file=sa_dir / "token",
                user=f"system:serviceaccount:{ns}:{pod.spec.service_account_name or 'default'}"))
        return Prepared(volumes=self._volumes(pod, place, token), token=token, kubeconfig=kubeconfig)

    def _token(self, pod: Any) -> str:
        sa = pod.spec.service_account_name or "default"
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name,
                                   "uid": pod.metadata.uid},
            },
        }
        tr = self.core.create_namespaced_service_account_token(sa, pod.metadata.namespace, body)
        return str(tr.status.token)

    def key_data(self, kind: str, name: str, ns: str) -> dict[str, bytes]:
        """The keys of ConfigMap (``kind`` ``configMap``) or Secret ``ns/name``, decoded."""
        if kind == "configMap":
            cm = self.core.read_namespaced_config_map(name, ns)
            out = {k: v.encode() for k, v in (cm.data or {}).items()}
            out.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
            return out
        sec = self.core.read_namespaced_secret(name, ns)
        return {k: base64.b64decode(v) for k, v in (sec.data or {}).items()}

    @staticmethod
    def _items(data: dict[str, bytes], items: Any) -> dict[str, bytes]:
        """The files a ConfigMap/Secret source projects: every key, or the listed ``items``."""
        pairs = [(i.key, i.path) for i in items] if items else [(k, k) for k in data]
        return {path: data[key] for key, path in pairs if key in data}

    def _payload(self, v: Any, ns: str, token: str | None, pod: Any, place: PodPlace) -> dict[str, bytes] | None:
        """The files of a ConfigMap, Secret or projected volume (None for other kinds)."""
        if v.config_map is not None:
            return self._items(self.key_data("configMap", v.config_map.name, ns), v.config_map.items)
        if v.secret is not None:
            return self._items(self.key_data("secret", v.secret.secret_name, ns), v.secret.items)
        if v.projected is None:
            return None
        files: dict[str, bytes] = {}
        for s in v.projected.sources or []:
            if s.service_account_token is not None and token:
                files[s.service_account_token.path] = token.encode()
            elif s.config_map is not None:
                files.update(self._items(self.key_data("configMap", s.config_map.name, ns), s.config_map.items))
            elif s.secret is not None:
                files.update(self._items(self.key_data("secret", s.secret.name, ns), s.secret.items))
            elif s.downward_api is not None:
                for item in s.downward_api.items or []:
                    if item.field_ref is not None:
                        files[item.path] = self.field(pod, item.field_ref.field_path, place).encode()
        return files

    def _volumes(self, pod: Any, place: PodPlace, token: str | None) -> dict[str, Path]:
        node_dir = self.lay.node_dir(place.node)
        out: dict[str, Path] = {}
        ns = pod.metadata.namespace
        for v in pod.spec.volumes or []:
            vdir = place.dir / "volumes" / v.name
            if v.host_path is not None:
                src = node_dir / v.host_path.path.lstrip("/")
                if not src.exists():
                    if v.host_path.type in ("File", "FileOrCreate"):
                        src.parent.mkdir(parents=True, exist_ok=True)
                        src.touch()
                    else:
                        src.mkdir(parents=True, exist_ok=True)
                out[v.name] = src
            elif v.empty_dir is not None:
                vdir.mkdir(parents=True, exist_ok=True)
                out[v.name] = vdir
            else:
                files = self._payload(v, ns, token, pod, place)
                if files is not None:
                    atomicdir.write(vdir, files)
                    out[v.name] = vdir
        return out

    def refresh(self, pod: Any, place: PodPlace, token: str | None) -> list[str]:
        """Rewrite the ConfigMap, Secret and projected volumes whose objects changed since they
        were written (as a kubelet does while a pod runs: a controller that fills its own
        certificate Secret after start, such as Kueue's, reads it this way). Returns the names of
        the volumes rewritten; an object that is gone or unreadable leaves its volume as it was."""
        changed = []
        for v in pod.spec.volumes or []:
            try:
                files = self._payload(v, pod.metadata.namespace, token, pod, place)
            except self.client.ApiException:
                continue
            if files is not None and atomicdir.write(place.dir / "volumes" / v.name, files):
                changed.append(v.name)
        return changed

    # -- per container ------------------------------------------------------------------------
    def container_spec(self, pod: Any, c: Any, argv: list[str], place: PodPlace, prep: Prepared) -> dict[str, Any]:
        """The launch spec :mod:`.podexec` reads for container ``c``."""
        env = self.env(pod, c, place, prep.kubeconfig)
        mounts = []
        for m in c.volume_mounts or []:
            if m.name not in prep.volumes:
                continue
            source = prep.volumes[m.name]
            sub = m.sub_path or (expand(m.sub_path_expr, env) if m.sub_path_expr else "")
            if sub:
                # one file or folder of the volume; a kubelet creates a missing one as a folder
                source = source / sub
                if ".." in Path(sub).parts or Path(sub).is_absolute():
                    raise errors.InputError(f"container {c.name!r}: subPath {sub!r} leaves its volume",
                                            field=f"volumeMounts[{m.name}].subPath")
                if not source.exists():
                    source.mkdir(parents=True)
            mounts.append({"source": str(source), "mountPath": m.mount_path, "readOnly": bool(m.read_only)})
        if prep.token and not any(m["mountPath"] == SA_PATH for m in mounts):
            mounts.append({"source": str(place.dir / "serviceaccount"), "mountPath": SA_PATH, "readOnly": True})
        net = place.net
        return {
            "net": {"name": net.holder.name, "pid": net.holder.pid, "ticks": net.holder.ticks} if net else None,
            "argv": expand_own_args(argv, c, env),
            "env": env,
            "workingDir": c.working_dir or "/",
            "mounts": mounts,
            "root": str(place.dir / f"root-{c.name}"),
        }

    def field(self, pod: Any, path: str, place: PodPlace) -> str:
        """A downward-API field of ``pod`` (``metadata.name``, ``status.podIP``, a label …)."""
        values = {
            "metadata.name": pod.metadata.name,
            "metadata.namespace": pod.metadata.namespace,
            "metadata.uid": pod.metadata.uid,
            "spec.nodeName": place.node,
            "spec.serviceAccountName": pod.spec.service_account_name or "default",
            # the address the process can bind and the API server reaches through the egress proxy
            "status.podIP": place.bind_ip(self.cfg.slot),
            "status.hostIP": "127.0.0.1",
        }
        if path in values:
            return str(values[path])
        m = re.match(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            src = pod.metadata.labels if m[1] == "labels" else pod.metadata.annotations
            return str((src or {}).get(m[2], ""))
        return ""

    def env(self, pod: Any, c: Any, place: PodPlace, kubeconfig: Path | None) -> dict[str, str]:
        ns = pod.metadata.namespace
        env = {
            # The image's python3 (with gpu-catalog's dependencies) comes first, as in the image;
            # the entrypoint's "python3" is mapped to the same interpreter by the kubelet.
            "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": pod.metadata.name,
            "HOME": "/root",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.cfg.ports["apiserver"]),
            "PYTHONPATH": self.cfg.python_path,
            "PYTHONUNBUFFERED": "1",
            "SIM_POD_IP": place.ip,
            # Sim-only: which sim cluster this process belongs to, and the cache folder holding it
            # (sim actuators call SimCluster(name), which looks there: a cluster started with
            # another $GPU_CATALOG_CACHE was not found and its faults were never cleared)
            "GPU_CATALOG_SIM_NAME": self.cfg.name,
            "GPU_CATALOG_CACHE": str(self.lay.root.parent.parent),
            "SIM_POD_LOOPBACK_IP": place.bind_ip(self.cfg.slot),
        }
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        if self.lay.slurm_conf.is_file():
            # Sim-only: the cluster runs a Slurm cluster on the host (``SimCluster.start_services``);
            # this is how a Slurm client in a pod (gpu-health's scontrol hook) finds it, as
            # /etc/slurm/slurm.conf would on a Slurm node. The pod's own env still wins.
            env["SLURM_CONF"] = str(self.lay.slurm_conf)
        gpu_bin = self.lay.node_dir(place.node) / "usr" / "bin"
        if (gpu_bin / "nvidia-smi").exists():  # what the NVIDIA container toolkit would inject
            env["PATH"] = f"{gpu_bin}:{env['PATH']}"
        for src in c.env_from or []:
            kind, ref = ("configMap", src.config_map_ref) if src.config_map_ref else ("secret", src.secret_ref)
            if ref is None:
                continue
            try:
                data = self.key_data(kind, ref.name, ns)
            except self.client.ApiException:
                if ref.optional:
                    continue
                raise
            env.update({(src.prefix or "") + k: v.decode(errors="replace") for k, v in data.items()})
        for e in c.env or []:
            if e.value_from is None:
                env[e.name] = expand(e.value or "", env)
            elif e.value_from.field_ref is not None:
                env[e.name] = self.field(pod, e.value_from.field_ref.field_path, place)
            elif e.value_from.config_map_key_ref is not None:
                r = e.value_from.config_map_key_ref
                env[e.name] = self.key_data("configMap", r.name, ns).get(r.key, b"").decode()
            elif e.value_from.secret_key_ref is not None:
                r = e.value_from.secret_key_ref
                env[e.name] = self.key_data("secret", r.name, ns).get(r.key, b"").decode()
        return env


def expand_own_args(argv: list[str], c: Any, env: dict[str, str]) -> list[str]:
    """``argv`` (from ``images.argv_for``: the image map's prefix, then the container's
    ``command[1:]`` and ``args``) with ``$(VAR)`` expanded in the container's part only: a kubelet
    expands a container's command and args (e.g. ``-v $(LOG_VERBOSITY)``), never its image's
    entrypoint. The first element of a set ``command`` was replaced by the map's prefix."""
    own = len(c.args or []) + max(len(c.command or []) - 1, 0)
    if own == 0:
        return list(argv)
    head, tail = argv[:len(argv) - own], argv[len(argv) - own:]
    return [*head, *(expand(a, env) for a in tail)]


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion; $$(VAR) escapes."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), value)
