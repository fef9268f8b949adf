"""The sim kubelet: runs pods whose image is in the image map as real host processes.

Supervised process (``python -m …sim.kubelet --state DIR``). It polls the pods bound to the
cluster's simulated nodes and keeps the pod lifecycle for each pod with a mapped image
(``images``), which kwok is told to ignore:

* allocates a unique pod IP: ``100.64.x.y`` in the API (Endpoints reject loopback addresses)
  and the loopback alias ``127.<slot>.x.y`` on the host, where the process binds (``$(POD_IP)``
  from a ``status.podIP`` fieldRef resolves to the alias; ``SIM_POD_IP`` holds the API one); the
  API server reaches the pod through the egress proxy (``egress``), which maps one to the other;
* has the pod's volumes, ServiceAccount token and each container's mounts and environment
  built (:mod:`.podspec`), and keeps its ConfigMap, Secret and projected volumes up to date
  while it runs (every ``REFRESH_S``, atomically, as a kubelet does);
* runs init containers in order, then starts each container through ``podexec`` (private
  mount namespace + bind mounts + chroot) with the argv from the image map and the pod's
  command/args;
* reports status from the real processes: Running, terminated with the exit code, restarts
  per restartPolicy with back-off (CrashLoopBackOff while waiting), Succeeded/Failed;
* on deletion sends SIGTERM, waits the grace period (capped), SIGKILLs, then removes the pod.

Logs of a container: ``<node folder>/pods/<ns>_<pod>/<container>.log`` (no kubelet API, so no
``kubectl logs``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpucatalog.clusters.sim import egress, images, nodefs, podspec, procs
from gpucatalog.clusters.sim import pki as pki_mod
from gpucatalog.clusters.sim.config import ClusterConfig
from gpucatalog.clusters.sim.layout import Layout
from gpucatalog.core import errors, kubeapi

POLL_S = 0.5
MAX_GRACE_S = 10.0
# How often a running pod's ConfigMap/Secret/projected volumes are compared with their objects
# (a kubelet's sync period is about a minute; the sim is quicker so suites need not wait).
REFRESH_S = 2.0


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
    token: str | None = None  # the pod's ServiceAccount token (projected volumes get it again on refresh)
    next_refresh: float = 0.0

    @property
    def place(self) -> podspec.PodPlace:
        return podspec.PodPlace(node=self.node, ip=self.ip, dir=self.dir)


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
        self.specs = podspec.Builder(self.core, client, lay, cfg, pki_mod.Pki(lay.pki).ca_crt.read_text())

    # -- pod IPs ------------------------------------------------------------------------
    def alloc_ip(self) -> str:
        """Next pod IP (100.64.x.y in the API; the process listens on 127.<slot>.x.y)."""
        n = self.next_ip
        self.next_ip += 1
        if n >= 65535:
            raise errors.ConflictError("sim pod IP range exhausted", expected="fewer than 65534 sim-kubelet pods")
        return egress.pod_ip(n)

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
        prep = self.specs.prepare(pod, run.place)
        run.token, run.next_refresh = prep.token, time.monotonic() + REFRESH_S
        if not self.run_init_containers(pod, run, prep):
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
            self._write_spec(pod, c, run, cont.argv, prep)
            self.spawn(run, cont)
        self.report(run, force=True)

    def _write_spec(self, pod: Any, c: Any, run: PodRun, argv: list[str], prep: podspec.Prepared) -> Path:
        run.spec_file[c.name] = run.dir / f"{c.name}.json"
        spec = self.specs.container_spec(pod, c, argv, run.place, prep)
        run.spec_file[c.name].write_text(json.dumps(spec, indent=1))
        return run.spec_file[c.name]

    def run_init_containers(self, pod: Any, run: PodRun, prep: podspec.Prepared) -> bool:
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
                spec = self._write_spec(pod, c, run, argv, prep)
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

    def refresh_volumes(self, pod: Any, run: PodRun) -> None:
        """Bring the pod's ConfigMap, Secret and projected volumes up to date, every REFRESH_S."""
        now = time.monotonic()
        if now < run.next_refresh or run.terminating:
            return
        run.next_refresh = now + REFRESH_S
        for name in self.specs.refresh(pod, run.place, run.token):
            print(f"{run.namespace}/{run.name}: volume {name} updated", flush=True)

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
                self.refresh_volumes(pod, run)
        for uid in list(self.pods):
            if uid not in seen:  # deleted behind our back (force delete): end its processes
                run = self.pods.pop(uid)
                self.kill(run, 0)
                shutil.rmtree(run.dir, ignore_errors=True)

    def shutdown(self) -> None:
        for run in list(self.pods.values()):
            self.kill(run, 2.0)


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
