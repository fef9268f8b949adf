"""The sim kubelet: runs pods whose image is in the image map as real host processes.

Supervised process (``python -m …sim.kubelet --state DIR``). It polls the pods bound to the
cluster's simulated nodes and, for each pod with a mapped image (``images``), which kwok is
told to ignore:

* allocates a unique pod IP: ``100.64.x.y`` in the API (Endpoints reject loopback addresses)
  and the loopback alias ``127.<slot>.x.y`` on the host, where the process binds (``$(POD_IP)``
  from a ``status.podIP`` fieldRef resolves to the alias; ``SIM_POD_IP`` holds the API one); the
  API server reaches the pod through the egress proxy (``egress``), which maps one to the other;
* requests a token for the pod's ServiceAccount through the TokenRequest API (bound to the
  pod) and materialises the ServiceAccount files, a kubeconfig using that token, ConfigMap,
  Secret, projected and emptyDir volumes under ``<node>/pods/<pod>/``;
* maps every hostPath volume to ``<node folder>/<path>`` (so a DaemonSet pod on node X reads
  node X's simulated ``/dev/kmsg``, sysfs and ``nvidia-smi``);
* starts each container through ``podexec`` (private mount namespace + bind mounts + chroot)
  with the argv from the image map and the pod's command/args, env from the pod spec;
* reports status from the real processes: Running, terminated with the exit code, restarts
  per restartPolicy with back-off (CrashLoopBackOff while waiting), Succeeded/Failed;
* on deletion sends SIGTERM, waits the grace period (capped), SIGKILLs, then removes the pod.

Logs of a container: ``<node folder>/pods/<ns>_<pod>/<container>.log`` (no kubelet API, so no
``kubectl logs``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpucatalog.clusters.sim import egress, images, nodefs, procs
from gpucatalog.clusters.sim import pki as pki_mod
from gpucatalog.clusters.sim.config import ClusterConfig
from gpucatalog.clusters.sim.layout import Layout
from gpucatalog.core import errors, kubeapi

SA_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
POLL_S = 0.5
MAX_GRACE_S = 10.0


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Container:
    name: str
    image: str
    argv: list[str]
    rec: procs.PidRecord | None = None
    popen: Any = None
    restarts: int = 0
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    exit_code: int | None = None
    started_at: str = ""
    finished_at: str = ""
    last: dict[str, Any] | None = None
    next_start: float = 0.0
    message: str = ""


@dataclass
class PodRun:
    uid: str
    namespace: str
    name: str
    node: str
    ip: str
    dir: Path
    restart_policy: str
    spec_file: dict[str, Path] = field(default_factory=dict)
    containers: list[Container] = field(default_factory=list)
    start_time: str = ""
    terminating: bool = False
    reported: str = ""


def is_sim_pod(pod: Any) -> bool:
    return any(images.lookup(c.image or "") for c in pod.spec.containers)


class Kubelet:
    def __init__(self, lay: Layout, cfg: ClusterConfig) -> None:
        from kubernetes import client

        self.lay = lay
        self.cfg = cfg
        self.api: Any = kubeapi.client_for(lay.component_kubeconfig("sim-kubelet"))
        self.core: Any = client.CoreV1Api(self.api)
        self.client = client
        self.pods: dict[str, PodRun] = {}
        self.retry_after: dict[str, float] = {}  # pod uid -> when to retry a failed init
        self.next_ip = 1
        self.ca = pki_mod.Pki(lay.pki).ca_crt.read_text()

    # -- pod IPs and files ------------------------------------------------------------------------
    def alloc_ip(self) -> str:
        """Next pod IP (100.64.x.y in the API; the process listens on 127.<slot>.x.y)."""
        n = self.next_ip
        self.next_ip += 1
        if n >= 65535:
            raise errors.ConflictError("sim pod IP range exhausted", expected="fewer than 65534 sim-kubelet pods")
        return egress.pod_ip(n)

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

    def _key_data(self, kind: str, name: str, ns: str) -> dict[str, bytes]:
        if kind == "configMap":
            cm = self.core.read_namespaced_config_map(name, ns)
            out = {k: v.encode() for k, v in (cm.data or {}).items()}
            out.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
            return out
        sec = self.core.read_namespaced_secret(name, ns)
        return {k: base64.b64decode(v) for k, v in (sec.data or {}).items()}

    def _write_items(self, dest: Path, data: dict[str, bytes], items: Any) -> None:
        dest.mkdir(parents=True, exist_ok=True)
        pairs = [(i.key, i.path) for i in items] if items else [(k, k) for k in data]
        for key, path in pairs:
            if key in data:
                (dest / path).parent.mkdir(parents=True, exist_ok=True)
                (dest / path).write_bytes(data[key])

    def _volumes(self, pod: Any, run: PodRun, token: str | None) -> dict[str, Path]:
        node_dir = self.lay.node_dir(run.node)
        out: dict[str, Path] = {}
        ns = pod.metadata.namespace
        for v in pod.spec.volumes or []:
            vdir = run.dir / "volumes" / v.name
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
            elif v.config_map is not None:
                self._write_items(vdir, self._key_data("configMap", v.config_map.name, ns), v.config_map.items)
                out[v.name] = vdir
            elif v.secret is not None:
                self._write_items(vdir, self._key_data("secret", v.secret.secret_name, ns), v.secret.items)
                out[v.name] = vdir
            elif v.projected is not None:
                vdir.mkdir(parents=True, exist_ok=True)
                for s in v.projected.sources or []:
                    if s.service_account_token is not None and token:
                        (vdir / s.service_account_token.path).write_text(token)
                    elif s.config_map is not None:
                        self._write_items(vdir, self._key_data("configMap", s.config_map.name, ns), s.config_map.items)
                    elif s.secret is not None:
                        self._write_items(vdir, self._key_data("secret", s.secret.name, ns), s.secret.items)
                    elif s.downward_api is not None:
                        for item in s.downward_api.items or []:
                            if item.field_ref is not None:
                                (vdir / item.path).write_text(self._field(pod, item.field_ref.field_path, run))
                out[v.name] = vdir
        return out

    def _field(self, pod: Any, path: str, run: PodRun) -> str:
        values = {
            "metadata.name": pod.metadata.name,
            "metadata.namespace": pod.metadata.namespace,
            "metadata.uid": pod.metadata.uid,
            "spec.nodeName": run.node,
            "spec.serviceAccountName": pod.spec.service_account_name or "default",
            # the address the process can bind and the API server reaches through the egress proxy
            "status.podIP": egress.loopback_of(run.ip, self.cfg.slot),
            "status.hostIP": "127.0.0.1",
        }
        if path in values:
            return str(values[path])
        m = re.match(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            src = pod.metadata.labels if m[1] == "labels" else pod.metadata.annotations
            return str((src or {}).get(m[2], ""))
        return ""

    def _env(self, pod: Any, c: Any, run: PodRun, kubeconfig: Path | None) -> dict[str, str]:
        ns = pod.metadata.namespace
        env = {
            # The image's python3 (with gpu-catalog's dependencies) comes first, as in the image;
            # the entrypoint's "python3" is mapped to the same interpreter below.
            "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOSTNAME": pod.metadata.name,
            "HOME": "/root",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.cfg.ports["apiserver"]),
            "PYTHONPATH": self.cfg.python_path,
            "PYTHONUNBUFFERED": "1",
            "SIM_POD_IP": run.ip,
            # Sim-only: which sim cluster this process belongs to (used by sim actuators).
            "GPU_CATALOG_SIM_NAME": self.cfg.name,
            "SIM_POD_LOOPBACK_IP": egress.loopback_of(run.ip, self.cfg.slot),
        }
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        if self.lay.slurm_conf.is_file():
            # Sim-only: the cluster runs a Slurm cluster on the host (``SimCluster.start_services``);
            # this is how a Slurm client in a pod (gpu-health's scontrol hook) finds it, as
            # /etc/slurm/slurm.conf would on a Slurm node. The pod's own env still wins.
            env["SLURM_CONF"] = str(self.lay.slurm_conf)
        gpu_bin = self.lay.node_dir(run.node) / "usr" / "bin"
        if (gpu_bin / "nvidia-smi").exists():  # what the NVIDIA container toolkit would inject
            env["PATH"] = f"{gpu_bin}:{env['PATH']}"
        for src in c.env_from or []:
            kind, ref = ("configMap", src.config_map_ref) if src.config_map_ref else ("secret", src.secret_ref)
            if ref is None:
                continue
            try:
                data = self._key_data(kind, ref.name, ns)
            except self.client.ApiException:
                if ref.optional:
                    continue
                raise
            env.update({(src.prefix or "") + k: v.decode(errors="replace") for k, v in data.items()})
        for e in c.env or []:
            if e.value_from is None:
                env[e.name] = _expand(e.value or "", env)
            elif e.value_from.field_ref is not None:
                env[e.name] = self._field(pod, e.value_from.field_ref.field_path, run)
            elif e.value_from.config_map_key_ref is not None:
                r = e.value_from.config_map_key_ref
                env[e.name] = self._key_data("configMap", r.name, ns).get(r.key, b"").decode()
            elif e.value_from.secret_key_ref is not None:
                r = e.value_from.secret_key_ref
                env[e.name] = self._key_data("secret", r.name, ns).get(r.key, b"").decode()
        return env

    # -- lifecycle --------------------------------------------------------------------------------
    def start_pod(self, pod: Any) -> None:
        uid = pod.metadata.uid
        run = PodRun(
            uid=uid, namespace=pod.metadata.namespace, name=pod.metadata.name, node=pod.spec.node_name,
            ip=self.alloc_ip(), dir=self.lay.node_dir(pod.spec.node_name) / "pods" / f"{pod.metadata.namespace}_{pod.metadata.name}",
            restart_policy=pod.spec.restart_policy or "Always", start_time=_now(),
        )
        shutil.rmtree(run.dir, ignore_errors=True)
        run.dir.mkdir(parents=True)
        self.pods[uid] = run
        token = None
        kubeconfig = None
        if pod.spec.automount_service_account_token is not False or any(
            s.service_account_token for v in pod.spec.volumes or [] if v.projected for s in v.projected.sources or []
        ):
            token = self._token(pod)
            sa_dir = run.dir / "serviceaccount"
            sa_dir.mkdir()
            (sa_dir / "token").write_text(token)
            (sa_dir / "ca.crt").write_text(self.ca)
            (sa_dir / "namespace").write_text(run.namespace)
            kubeconfig = pki_mod.write_kubeconfig(run.dir / "kubeconfig", pki_mod.kubeconfig_doc(
                self.cfg.api_url, sa_dir / "ca.crt", token_file=sa_dir / "token",
                user=f"system:serviceaccount:{run.namespace}:{pod.spec.service_account_name or 'default'}"))
        vols = self._volumes(pod, run, token)
        if not self.run_init_containers(pod, run, vols, token, kubeconfig):
            return
        for c in pod.spec.containers:
            cont = Container(c.name, c.image or "", [])
            run.containers.append(cont)
            if images.lookup(c.image or "") is None:
                # a sidecar of an image the sim cannot run: reported running, no process
                cont.state, cont.started_at = "running", _now()
                continue
            try:
                cont.argv = images.argv_for(self.api.sanitize_for_serialization(c))
            except errors.CatalogError as exc:
                cont.state, cont.reason, cont.message = "waiting", "StartError", str(exc)
                continue
            if cont.argv and cont.argv[0] in ("python3", "python"):
                cont.argv[0] = sys.executable
            self._write_spec(pod, c, run, cont.argv, vols, token, kubeconfig)
            self.spawn(run, cont)
        self.report(run, force=True)

    def _write_spec(self, pod: Any, c: Any, run: PodRun, argv: list[str], vols: dict[str, Path],
                    token: str | None, kubeconfig: Path | None) -> Path:
        mounts = [{"source": str(vols[m.name]), "mountPath": m.mount_path, "readOnly": bool(m.read_only)}
                  for m in c.volume_mounts or [] if m.name in vols]
        if token and not any(m["mountPath"] == SA_PATH for m in mounts):
            mounts.append({"source": str(run.dir / "serviceaccount"), "mountPath": SA_PATH, "readOnly": True})
        spec = {
            "argv": argv,
            "env": self._env(pod, c, run, kubeconfig),
            "workingDir": c.working_dir or "/",
            "mounts": mounts,
            "root": str(run.dir / f"root-{c.name}"),
        }
        run.spec_file[c.name] = run.dir / f"{c.name}.json"
        run.spec_file[c.name].write_text(json.dumps(spec, indent=1))
        return run.spec_file[c.name]

    def run_init_containers(self, pod: Any, run: PodRun, vols: dict[str, Path], token: str | None,
                            kubeconfig: Path | None) -> bool:
        """Run init containers in order (mapped images for real, others count as completed).

        Blocking, with a time limit: init containers of the charts certified here are short.
        Returns False when one failed (the pod is reported and retried or failed per policy).
        """
        from gpucatalog.core import executor

        statuses: list[dict[str, Any]] = []
        for c in pod.spec.init_containers or []:
            started = _now()
            code = 0
            if images.lookup(c.image or "") is not None:
                argv = images.argv_for(self.api.sanitize_for_serialization(c))
                if argv and argv[0] in ("python3", "python"):
                    argv[0] = sys.executable
                spec = self._write_spec(pod, c, run, argv, vols, token, kubeconfig)
                try:
                    proc = executor.run([sys.executable, "-m", "gpucatalog.clusters.sim.podexec", str(spec)],
                                        env={"PYTHONPATH": self.cfg.python_path}, check=False, timeout=120)
                    code = proc.returncode
                    (run.dir / f"{c.name}.log").write_text(proc.stdout + proc.stderr)
                except errors.ToolError as exc:
                    code = exc.returncode
            statuses.append({"name": c.name, "image": c.image, "imageID": f"sim://{c.image}", "ready": code == 0,
                             "restartCount": 0, "state": {"terminated": {
                                 "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                 "startedAt": started, "finishedAt": _now()}}})
            if code != 0:
                phase = "Failed" if run.restart_policy == "Never" else "Pending"
                self._patch_status(run, {"phase": phase, "initContainerStatuses": statuses})
                self.pods.pop(run.uid, None)
                self.retry_after[run.uid] = time.monotonic() + (5.0 if phase == "Pending" else float("inf"))
                return False
        if statuses:
            self._patch_status(run, {"initContainerStatuses": statuses})
        return True

    def _patch_status(self, run: PodRun, status: dict[str, Any]) -> None:
        try:
            self.core.patch_namespaced_pod_status(run.name, run.namespace, {"status": status})
        except self.client.ApiException as exc:
            if exc.status != 404:
                print(f"status of {run.namespace}/{run.name}: {exc.status} {exc.reason}", flush=True)

    def spawn(self, run: PodRun, cont: Container) -> None:
        from gpucatalog.core import executor

        cont.popen = executor.spawn(
            [sys.executable, "-m", "gpucatalog.clusters.sim.podexec", str(run.spec_file[cont.name])],
            log_path=run.dir / f"{cont.name}.log", env={"PYTHONPATH": self.cfg.python_path},
        )
        cont.rec = procs.record(run.dir, cont.name, cont.popen.pid)
        cont.state, cont.started_at, cont.exit_code = "running", _now(), None

    def poll(self, run: PodRun) -> None:
        now = time.monotonic()
        for cont in run.containers:
            if cont.popen is not None and cont.state == "running" and cont.popen.poll() is not None:
                cont.exit_code = cont.popen.returncode
                if cont.exit_code < 0:  # killed by a signal: report like a runtime (128 + signal)
                    cont.exit_code = 128 - cont.exit_code
                cont.state, cont.finished_at = "terminated", _now()
                cont.reason = "Completed" if cont.exit_code == 0 else "Error"
                again = run.restart_policy == "Always" or (run.restart_policy == "OnFailure" and cont.exit_code != 0)
                if again and not run.terminating:
                    cont.last = self._state_of(cont)
                    cont.state, cont.reason = "waiting", "CrashLoopBackOff"
                    cont.next_start = now + min(1.0 * 2**cont.restarts, 20.0)
            if cont.state == "waiting" and cont.reason == "CrashLoopBackOff" and now >= cont.next_start:
                cont.restarts += 1
                self.spawn(run, cont)
        self.report(run)

    def _state_of(self, cont: Container) -> dict[str, Any]:
        if cont.state == "running":
            return {"running": {"startedAt": cont.started_at}}
        if cont.state == "terminated":
            return {"terminated": {"exitCode": cont.exit_code, "reason": cont.reason, "startedAt": cont.started_at,
                                   "finishedAt": cont.finished_at}}
        return {"waiting": {"reason": cont.reason, "message": cont.message}}

    def report(self, run: PodRun, force: bool = False) -> None:
        statuses = []
        for c in run.containers:
            s: dict[str, Any] = {
                "name": c.name, "image": c.image, "imageID": f"sim://{c.image}",
                "containerID": f"sim://{c.rec.pid if c.rec else 0}", "ready": c.state == "running",
                "started": c.state == "running", "restartCount": c.restarts, "state": self._state_of(c),
            }
            if c.last:
                s["lastState"] = c.last
            statuses.append(s)
        all_ready = all(c.state == "running" for c in run.containers)
        if all(c.state == "terminated" for c in run.containers):
            phase = "Succeeded" if all(c.exit_code == 0 for c in run.containers) else "Failed"
        else:
            phase = "Running" if any(c.state in ("running", "terminated") or c.restarts for c in run.containers) else "Pending"
        cond = "True" if all_ready else "False"
        status: dict[str, Any] = {
            "phase": phase, "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": run.ip, "podIPs": [{"ip": run.ip}], "startTime": run.start_time,
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": cond},
                {"type": "Ready", "status": cond},
            ],
            "containerStatuses": statuses,
        }
        digest = json.dumps([phase, cond, [(s["restartCount"], list(s["state"])) for s in statuses]])
        if digest == run.reported and not force:
            return
        for cnd in status["conditions"]:
            cnd["lastTransitionTime"] = _now()
        try:
            self.core.patch_namespaced_pod_status(run.name, run.namespace, {"status": status})
            run.reported = digest
        except self.client.ApiException as exc:
            if exc.status != 404:
                print(f"status of {run.namespace}/{run.name}: {exc.status} {exc.reason}", flush=True)

    def kill(self, run: PodRun, grace: float) -> None:
        recs = [c.rec for c in run.containers if c.rec is not None]
        procs.stop(recs, grace=min(grace, MAX_GRACE_S))
        for c in run.containers:
            if c.popen is not None:
                c.popen.wait()

    def delete(self, run: PodRun, grace: float) -> None:
        run.terminating = True
        self.kill(run, grace)
        self.pods.pop(run.uid, None)
        try:
            self.core.delete_namespaced_pod(
                run.name, run.namespace, body={"gracePeriodSeconds": 0, "preconditions": {"uid": run.uid}})
        except self.client.ApiException as exc:
            if exc.status not in (404, 409):
                print(f"delete {run.namespace}/{run.name}: {exc.status} {exc.reason}", flush=True)
        shutil.rmtree(run.dir, ignore_errors=True)

    def sync(self) -> None:
        pods: list[Any] = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=", resource_version="0").items
        seen = set()
        for pod in pods:
            if not is_sim_pod(pod) or nodefs.ensure(self.lay.nodes, pod.spec.node_name, self.cfg.name) is None:
                continue
            uid = pod.metadata.uid
            seen.add(uid)
            run = self.pods.get(uid)
            if pod.metadata.deletion_timestamp is not None:
                if run is not None:
                    self.delete(run, float(pod.metadata.deletion_grace_period_seconds or 0))
                else:
                    self.delete(PodRun(uid, pod.metadata.namespace, pod.metadata.name, pod.spec.node_name, "",
                                       self.lay.node_dir(pod.spec.node_name) / "pods" / "gone", "Never"), 0)
                continue
            if run is None and time.monotonic() < self.retry_after.get(uid, 0.0):
                continue
            if run is None and (pod.status.phase or "Pending") in ("Pending", "Running"):
                try:
                    self.start_pod(pod)
                except self.client.ApiException as exc:
                    print(f"start {pod.metadata.namespace}/{pod.metadata.name}: {exc.status} {exc.reason}", flush=True)
                    self.pods.pop(uid, None)
                continue
            if run is not None:
                self.poll(run)
        for uid in list(self.pods):
            if uid not in seen:  # deleted behind our back (force delete): end its processes
                run = self.pods.pop(uid)
                self.kill(run, 0)
                shutil.rmtree(run.dir, ignore_errors=True)

    def shutdown(self) -> None:
        for run in list(self.pods.values()):
            self.kill(run, 2.0)


def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion; $$(VAR) escapes."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), value)


def main(argv: list[str] | None = None) -> int:
    import urllib3

    ap = argparse.ArgumentParser(prog="sim-kubelet")
    ap.add_argument("--state", required=True, type=Path)
    args = ap.parse_args(argv)
    lay = Layout(args.state)
    cfg = ClusterConfig.load(lay.config)
    # pod processes of an earlier kubelet of this cluster (a crash): end them, they restart fresh
    procs.stop(procs.read_all_pods(lay.nodes), grace=2.0)
    kubelet = Kubelet(lay, cfg)
    stopping = False

    def on_term(_s: int, _f: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print(f"sim kubelet up (pid {os.getpid()}), pod IPs {egress.POD_NET} -> 127.{cfg.slot}.0.0/16", flush=True)
    while not stopping:
        try:
            kubelet.sync()
        except kubelet.client.ApiException as exc:
            print(f"api error: {exc.status} {exc.reason}", flush=True)
        except (OSError, urllib3.exceptions.HTTPError) as exc:
            print(f"connection error: {exc}", flush=True)
        time.sleep(POLL_S)
    kubelet.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
