"""The sim kubelet: runs pods whose image is in the image map as real host processes.

Supervised process (``python -m …sim.kubelet --state DIR``). It polls the pods bound to the
cluster's simulated nodes and keeps the pod lifecycle for each pod with a mapped image
(``images``), which kwok is told to ignore:

* allocates a unique pod IP ``100.64.x.y`` and gives the pod its own network namespace with
  that IP on its loopback (:mod:`.netns`); all containers of the pod share it, the relay
  (:mod:`.relay`) lets them reach the API server at ``127.0.0.1:<port>`` as their kubeconfig
  says, and the API server reaches them (webhooks) through the egress proxy (``egress``). A
  ``hostNetwork`` pod stays on the host and binds the loopback alias ``127.<slot>.x.y``;
* has the pod's volumes, ServiceAccount token and each container's mounts and environment
  built (:mod:`.podspec`), and keeps its ConfigMap, Secret and projected volumes up to date
  while it runs (every ``REFRESH_S``, atomically, as a kubelet does);
* runs init containers in order, then starts each container through ``podexec`` (private
  mount namespace + bind mounts + chroot) with the argv from the image map and the pod's
  command/args;
* reports status from the real processes: Running, terminated with the exit code, restarts
  per restartPolicy with back-off (CrashLoopBackOff while waiting), Succeeded/Failed;
* on deletion runs each running container's preStop hook, sends SIGTERM, waits the rest of the
  grace period (capped at MAX_GRACE_S), SIGKILLs, writes the terminal status, then removes the pod.

Logs of a container: ``<node folder>/pods/<ns>_<pod>/<container>.log``, served to ``kubectl logs``
by kwok (:mod:`.podlogs`). ``kubectl exec`` runs in the container (:mod:`.kubeletapi`, a thread of
this process, which every node advertises as its kubelet API).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import select
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

from gpucatalog.clusters.sim import (
    egress,
    imagemap,
    images,
    kubeletapi,
    netns,
    nodefs,
    podlogs,
    podrun,
    podspec,
    probes,
    procs,
    relay,
    rootfs,
)
from gpucatalog.clusters.sim import pki as pki_mod
from gpucatalog.clusters.sim.config import ClusterConfig
from gpucatalog.clusters.sim.layout import Layout
from gpucatalog.core import errors, executor, kubeapi

POLL_S = 0.5
NEVER_STARTED = "1970-01-01T00:00:00Z"
START_WAIT_S = 10.0  # how long kubectl exec waits for a container's launcher to exec its program
MAX_GRACE_S = 10.0
# A kubelet gives a container that failed its liveness probe its terminationGracePeriodSeconds;
# the sim caps it so that one dying container does not stall every other pod's poll.
LIVENESS_KILL_GRACE_S = 2.0
# after a preStop hook used the grace period up, the containers still get this long after SIGTERM
MIN_GRACE_AFTER_HOOK_S = 2.0
# How often a running pod's ConfigMap/Secret/projected volumes are compared with their objects
# (a kubelet's sync period is about a minute; the sim is quicker so suites need not wait).
REFRESH_S = 2.0


def runs_here(pod: Mapping[str, Any]) -> bool:
    """Whether this kubelet runs the pod (the API's plain JSON), not kwok (:func:`images.sim_runs`)."""
    return images.sim_runs([c.get("image") or "" for c in (pod.get("spec") or {}).get("containers") or []],
                           (pod.get("metadata") or {}).get("annotations"))


# a base image's python (the python image) is the sim's own interpreter, wherever a command names it
_PYTHON = re.compile(r"(.*/)?python(3(\.\d+)?)?")
# what a runtime reports for a container it could not start (containerd: exit code 128)
START_ERROR_CODE = 128


class Kubelet:
    def __init__(self, lay: Layout, cfg: ClusterConfig) -> None:
        from kubernetes import client

        self.lay = lay
        self.cfg = cfg
        self.api: Any = kubeapi.client_for(lay.component_kubeconfig("sim-kubelet"))
        self.core: Any = client.CoreV1Api(self.api)
        self.client = client
        self.pods: dict[str, podrun.PodRun] = {}
        self.retry_after: dict[str, float] = {}  # pod uid -> when to retry a failed init
        self.next_ip = 1
        self.custom: Any = client.CustomObjectsApi(self.api)
        self.specs = podspec.Builder(self.core, client, lay, cfg, pki_mod.Pki(lay.pki).ca_crt.read_text())
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="probe")
        self.started = threading.Condition()  # notified when a "created" container runs or ends

    def ensure_logs_crd(self) -> None:
        """The ``Logs`` CRD kwok serves ``kubectl logs`` from (:mod:`.podlogs`)."""
        ext: Any = self.client.ApiextensionsV1Api(self.api)
        try:
            ext.create_custom_resource_definition(podlogs.crd())
        except self.client.ApiException as exc:
            if exc.status != 409:
                raise

    def exec_target(self, namespace: str, pod: str, container: str) -> kubeletapi.Target | str | None:
        """What ``kubectl exec`` enters (:mod:`.kubeletapi`, another thread): the container's
        process; why not (not running); None for a pod this kubelet does not run (kwok's)."""
        run = next((r for r in list(self.pods.values()) if (r.namespace, r.name) == (namespace, pod)), None)
        if run is None:
            return None
        cont = next((c for c in run.containers if c.name == container), None)
        if cont is None:
            return f"container {container!r} not found in pod {namespace}/{pod}"
        with self.started:  # still in the launcher: the runtime's answer is a moment away
            self.started.wait_for(lambda: cont.state != "created", timeout=START_WAIT_S)
        rec = cont.rec
        if cont.state != "running" or rec is None:
            return f"container {container!r} of pod {namespace}/{pod} is not running ({cont.state})"
        return kubeletapi.Target(rec.pid)

    # -- pod IPs ------------------------------------------------------------------------
    def alloc_ip(self) -> str:
        """Next pod IP (100.64.x.y: in the API and on the pod namespace's loopback; a
        hostNetwork pod's process listens on 127.<slot>.x.y)."""
        n = self.next_ip
        self.next_ip += 1
        if n >= 65535:
            raise errors.ConflictError("sim pod IP range exhausted", expected="fewer than 65534 sim-kubelet pods")
        return egress.pod_ip(n)

    # -- lifecycle --------------------------------------------------------------------------------
    def start_pod(self, pod: Any) -> None:
        uid = pod.metadata.uid
        run = podrun.PodRun(
            uid=uid, namespace=pod.metadata.namespace, name=pod.metadata.name, node=pod.spec.node_name,
            ip=self.alloc_ip(), dir=self.lay.node_dir(pod.spec.node_name) / "pods" / f"{pod.metadata.namespace}_{pod.metadata.name}",
            restart_policy=pod.spec.restart_policy or "Always", start_time=podrun.now(),
        )
        shutil.rmtree(run.dir, ignore_errors=True)
        run.dir.mkdir(parents=True)
        self.pods[uid] = run
        if not pod.spec.host_network:
            run.net, run.pause = netns.create(run.dir, run.ip, self.lay.root)
            try:
                relay.request_sync(self.lay)  # the pod reaches the API server from its first instruction
            except OSError as exc:
                print(f"pod network relay not answering ({exc}); it catches up within seconds", flush=True)
        prep = self.specs.prepare(pod, run.place)
        run.token, run.next_refresh = prep.token, time.monotonic() + REFRESH_S
        if not self.run_init_containers(pod, run, prep):
            return
        for c in pod.spec.containers:
            cont = podrun.Container(c.name, c.image or "", [], spec=c)
            run.containers.append(cont)
            entry = images.lookup(c.image or "")
            if entry is None:
                # a sidecar of an image the sim cannot run: reported running, no process
                cont.state, cont.started_at = "running", podrun.now()
                continue
            cont.log = podlogs.ContainerLog(run.dir / f"{c.name}.log", run.dir / "logs" / c.name)
            run.logs[c.name] = cont.log
            try:
                cont.argv = self._argv(c, entry)
                self._write_spec(pod, c, run, cont.argv, prep, entry)
            except errors.CatalogError as exc:
                self._start_failed(run, cont, str(exc))
                continue
            self.spawn(run, cont)
        self.report(run, force=True)
        self.apply_logs(run)

    def _argv(self, c: Any, entry: images.ImageEntry) -> list[str]:
        argv = images.argv_for(self.api.sanitize_for_serialization(c))
        if not argv:
            raise errors.InputError(f"container {c.name!r}: no command specified (the image has no CMD either)")
        if argv[0] in ("python3", "python") or (entry.rootfs == "host" and _PYTHON.fullmatch(argv[0])):
            argv[0] = sys.executable
        return argv

    def _start_failed(self, run: podrun.PodRun, cont: podrun.Container, why: str) -> None:
        """The container could not be started (its command not found, say): terminated with
        StartError, as a runtime reports it, and restarted or not per the pod's restartPolicy."""
        now = podrun.now()
        cont.popen, cont.rec, cont.probes = None, None, None
        cont.state, cont.reason, cont.message, cont.exit_code = "terminated", "StartError", why, START_ERROR_CODE
        cont.started_at = cont.finished_at = now
        print(f"{run.namespace}/{run.name} {cont.name}: StartError: {why}", flush=True)
        self._after_exit(run, cont, time.monotonic())

    def _write_spec(self, pod: Any, c: Any, run: podrun.PodRun, argv: list[str], prep: podspec.Prepared,
                    entry: images.ImageEntry | None = None) -> Path:
        spec = self.specs.container_spec(pod, c, argv, run.place, prep)
        if entry is not None and entry.rootfs not in ("", "host"):
            spec["rootfs"] = str(rootfs.ensure(entry.rootfs))
        path = run.dir / f"{c.name}.json"
        path.write_text(json.dumps(spec, indent=1))
        run.spec_file[c.name] = path
        return path

    def run_init_containers(self, pod: Any, run: podrun.PodRun, prep: podspec.Prepared) -> bool:
        """Run init containers in order (mapped images for real, others count as completed).

        Blocking, with a time limit: init containers of the charts certified here are short.
        Returns False when one failed (the pod is reported and retried or failed per policy).
        """
        statuses: list[dict[str, Any]] = []
        for c in pod.spec.init_containers or []:
            started = podrun.now()
            code = 0
            entry = images.lookup(c.image or "")
            if entry is not None:
                why = self._changed(c.image or "")
                if why:
                    raise errors.InputError(f"init container {c.name}: {why}")
                spec = self._write_spec(pod, c, run, self._argv(c, entry), prep, entry)
                try:
                    proc = executor.run([sys.executable, "-m", "gpucatalog.clusters.sim.podexec", str(spec)],
                                        env={"PYTHONPATH": self.cfg.python_path}, check=False, timeout=120)
                    code = proc.returncode
                    (run.dir / f"{c.name}.log").write_text(proc.stdout + proc.stderr)
                    log = run.logs[c.name] = podlogs.ContainerLog(run.dir / f"{c.name}.log", run.dir / "logs" / c.name)
                    log.pump(final=True)
                except errors.ToolError as exc:
                    code = exc.returncode
            statuses.append({"name": c.name, "image": c.image, "imageID": f"sim://{c.image}", "ready": code == 0,
                             "restartCount": 0, "state": {"terminated": {
                                 "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                 "startedAt": started, "finishedAt": podrun.now()}}})
            if code != 0:
                phase = "Failed" if run.restart_policy == "Never" else "Pending"
                self._patch_status(run, {"phase": phase, "initContainerStatuses": statuses})
                self._release_net(run)
                self.pods.pop(run.uid, None)
                self.retry_after[run.uid] = time.monotonic() + (5.0 if phase == "Pending" else float("inf"))
                return False
        if statuses:
            self._patch_status(run, {"initContainerStatuses": statuses})
        return True

    def _patch_status(self, run: podrun.PodRun, status: dict[str, Any]) -> None:
        try:
            self.core.patch_namespaced_pod_status(run.name, run.namespace, {"status": status})
        except self.client.ApiException as exc:
            if exc.status != 404:
                print(f"status of {run.namespace}/{run.name}: {exc.status} {exc.reason}", flush=True)

    def _changed(self, image: str) -> str:
        """Why a container of ``image`` may not start: its mapped executable is no longer the file
        hashed when the image map was loaded ('' when it is, or the image is not mapped by one)."""
        binary, why = images.changed(image)
        if binary is not None and why:
            imagemap.note_refused(self.lay.image_map_refused, binary, why)
            print(f"refusing to start {image}: {why}", flush=True)
        return why

    def spawn(self, run: podrun.PodRun, cont: podrun.Container) -> None:
        why = self._changed(cont.image)
        if why:  # reported as a runtime reports a container it cannot create; never retried
            cont.state, cont.reason, cont.message = "waiting", "StartError", why
            return
        if cont.log is not None:
            cont.log.start(cont.restarts)
        read_end, write_end = os.pipe()
        try:
            cont.popen = executor.spawn(
                [sys.executable, "-m", "gpucatalog.clusters.sim.podexec", str(run.spec_file[cont.name]),
                 str(write_end)],
                log_path=run.dir / f"{cont.name}.log", env={"PYTHONPATH": self.cfg.python_path},
                pass_fds=(write_end,),
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        os.set_blocking(read_end, False)
        cont.rec = procs.record(run.dir, cont.name, cont.popen.pid)
        # "running" (status, kubectl exec, probes) once the launcher has exec'd the program
        cont.state, cont.reason, cont.exit_code, cont.started_fd = "created", "ContainerCreating", None, read_end
        cont.started_at = NEVER_STARTED  # until the exec, as containerd reports a StartError

    def _check_started(self, cont: podrun.Container) -> bool:
        """Whether the launcher of a "created" container has just exec'd its program (then it is
        running from now, probes included). A launcher that could not exec it stays "created"
        until its exit is seen."""
        if cont.started_fd is None:
            return False
        try:
            got = os.read(cont.started_fd, 1)
        except BlockingIOError:
            return False
        _close_started(cont)
        if got:  # the launcher's byte: it failed before or at the exec
            return False
        with self.started:
            cont.state, cont.started_at = "running", podrun.now()
            self.started.notify_all()
        cont.probes = probes.ContainerProbes.of(cont.spec, time.monotonic())
        return True

    def wait_for_starts(self, timeout: float) -> None:
        """Sleep ``timeout`` seconds, reporting each container that starts meanwhile at once
        (a launcher takes a fraction of a second; a whole poll later would slow every start)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            pending = {c.started_fd: (run, c) for run in list(self.pods.values()) for c in run.containers
                       if c.started_fd is not None}
            if not pending:
                time.sleep(left)
                return
            ready, _, _ = select.select(list(pending), [], [], left)
            for fd in ready:
                run, cont = pending[fd]
                if self._check_started(cont):
                    self.report(run)

    def poll(self, run: podrun.PodRun) -> None:
        now = time.monotonic()
        for cont in run.containers:
            if cont.log is not None:
                cont.log.pump()
            if cont.state == "created":
                self._check_started(cont)
            if cont.popen is not None and cont.state in ("created", "running") and cont.popen.poll() is not None:
                self._exited(run, cont, now)
            elif cont.state == "running" and cont.probes is not None and cont.rec is not None:
                cont.probes.tick(self.pool, run.place.bind_ip(self.cfg.slot), run.net, cont.rec.pid)
                why = cont.probes.liveness_failed
                if why:
                    print(f"{run.namespace}/{run.name} {cont.name}: {why}; killing it", flush=True)
                    _stop([cont], LIVENESS_KILL_GRACE_S)
                    self._exited(run, cont, now, message=why)
            if cont.state == "waiting" and cont.reason == "CrashLoopBackOff" and now >= cont.next_start:
                cont.restarts += 1
                if not cont.argv or cont.name not in run.spec_file:  # it never got as far as a process
                    self._start_failed(run, cont, cont.message or "could not be started")
                else:
                    self.spawn(run, cont)
        self.report(run)
        self.apply_logs(run)

    def _exited(self, run: podrun.PodRun, cont: podrun.Container, now: float, message: str = "") -> None:
        _close_started(cont)
        cont.exit_code = cont.popen.returncode
        if cont.exit_code < 0:  # killed by a signal: report like a runtime (128 + signal)
            cont.exit_code = 128 - cont.exit_code
        with self.started:
            cont.state, cont.finished_at, cont.probes = "terminated", podrun.now(), None
            self.started.notify_all()
        cont.reason = "Completed" if cont.exit_code == 0 else "Error"
        cont.message = message
        failed = run.spec_file.get(cont.name, run.dir / "none").with_suffix(".start-error")
        if failed.exists():  # podexec could not exec the command: the runtime's StartError
            cont.reason, cont.exit_code, cont.message = "StartError", START_ERROR_CODE, failed.read_text().strip()
            failed.unlink()
        if cont.log is not None:
            cont.log.pump(final=True)
        self._after_exit(run, cont, now)

    def _after_exit(self, run: podrun.PodRun, cont: podrun.Container, now: float) -> None:
        again = run.restart_policy == "Always" or (run.restart_policy == "OnFailure" and cont.exit_code != 0)
        if again and not run.terminating:
            cont.last = cont.state_doc()
            cont.state, cont.reason = "waiting", "CrashLoopBackOff"
            cont.next_start = now + min(1.0 * 2**cont.restarts, 20.0)

    def report(self, run: podrun.PodRun, force: bool = False) -> None:
        status = podrun.status(run)
        digest = podrun.digest(status)
        if digest == run.reported and not force:
            return
        for cnd in status["conditions"]:
            cnd["lastTransitionTime"] = podrun.now()
        try:
            self.core.patch_namespaced_pod_status(run.name, run.namespace, {"status": status})
            run.reported = digest
        except self.client.ApiException as exc:
            if exc.status != 404:
                print(f"status of {run.namespace}/{run.name}: {exc.status} {exc.reason}", flush=True)

    def refresh_volumes(self, pod: Any, run: podrun.PodRun) -> None:
        """Bring the pod's ConfigMap, Secret and projected volumes up to date, every REFRESH_S."""
        now = time.monotonic()
        if now < run.next_refresh or run.terminating:
            return
        run.next_refresh = now + REFRESH_S
        for name in self.specs.refresh(pod, run.place, run.token):
            print(f"{run.namespace}/{run.name}: volume {name} updated", flush=True)

    def apply_logs(self, run: podrun.PodRun) -> None:
        """Point the pod's ``Logs`` object at the current and previous log files (kubectl logs)."""
        body = podlogs.logs_object(run.namespace, run.name, run.uid, run.logs)
        key = json.dumps(body["spec"])
        if key == run.logs_reported or not run.logs:
            return
        args = (podlogs.GROUP, podlogs.VERSION, run.namespace, podlogs.PLURAL)
        try:
            try:
                self.custom.create_namespaced_custom_object(*args, body)
            except self.client.ApiException as exc:
                if exc.status != 409:
                    raise
                self.custom.patch_namespaced_custom_object(*args, run.name, {"spec": body["spec"]})
            run.logs_reported = key
        except self.client.ApiException as exc:  # CRD not served yet, pod gone: tried again next poll
            if exc.status != 404:
                print(f"logs of {run.namespace}/{run.name}: {exc.status} {exc.reason}", flush=True)

    def kill(self, run: podrun.PodRun, grace: float) -> None:
        """End every process of the pod, its network namespace last: each running container's
        preStop hook first (exec, httpGet, sleep; all at once, within the grace period), then
        SIGTERM, SIGKILL for what is left when the rest of the grace period is up (at least
        MIN_GRACE_AFTER_HOOK_S after a hook, as a kubelet gives)."""
        grace = min(grace, MAX_GRACE_S)
        deadline = time.monotonic() + grace
        if grace > 0 and self._pre_stop(run, deadline):
            grace = max(deadline - time.monotonic(), MIN_GRACE_AFTER_HOOK_S)
        _stop(run.containers, grace)
        for cont in run.containers:
            _close_started(cont)
        self._release_net(run)

    def _pre_stop(self, run: podrun.PodRun, deadline: float) -> bool:
        """Run the preStop hooks of the running containers; whether any ran."""
        todo = []
        for cont in run.containers:
            life = getattr(cont.spec, "lifecycle", None)
            hook = life.pre_stop if life is not None else None
            if hook is None or cont.state != "running" or cont.rec is None:
                continue
            left = max(deadline - time.monotonic(), 0.1)
            try:
                if hook.sleep is not None:
                    spec = probes.Spec("sleep", timeout=min(float(hook.sleep.seconds or 0), left))
                else:
                    spec = probes.handler(hook, cont.spec) or probes.Spec("none")
                    spec = dataclasses.replace(spec, timeout=left)
            except (AttributeError, TypeError, ValueError) as exc:  # never let one hook stop the kubelet
                print(f"{run.namespace}/{run.name} {cont.name}: preStop hook not run: {exc}", flush=True)
                continue
            todo.append((cont, self.pool.submit(_hook, spec, run.place.bind_ip(self.cfg.slot), run.net, cont.rec.pid)))
        for cont, fut in todo:
            try:
                ok, seen = fut.result(timeout=max(deadline - time.monotonic(), 0.1))
            except FutureTimeout:
                ok, seen = False, "still running when the grace period ran out"
            if not ok:  # a kubelet records a FailedPreStopHook event and goes on
                print(f"{run.namespace}/{run.name} {cont.name}: preStop hook failed: {seen}", flush=True)
        return bool(todo)

    def _release_net(self, run: podrun.PodRun) -> None:
        if run.net is not None:
            netns.remove(run.net, run.pause, self.lay.root)
            run.net = None

    def delete(self, run: podrun.PodRun, grace: float) -> None:
        run.terminating = True
        self.kill(run, grace)
        self.pods.pop(run.uid, None)
        if run.containers:  # none: a pod this kubelet never ran, whose status it leaves alone
            # as a real kubelet does: the terminal status (each container's exit code) is written
            # before the pod is removed, so a watcher sees how a pod deleted mid-run ended
            now = time.monotonic()
            for cont in run.containers:
                if cont.state not in ("created", "running"):
                    continue
                if cont.popen is not None:
                    self._exited(run, cont, now)
                else:  # a container the sim reports without a process
                    cont.state, cont.finished_at, cont.exit_code, cont.reason = "terminated", podrun.now(), 0, "Completed"
            self.report(run)
        try:
            self.core.delete_namespaced_pod(
                run.name, run.namespace, body={"gracePeriodSeconds": 0, "preconditions": {"uid": run.uid}})
        except self.client.ApiException as exc:
            if exc.status not in (404, 409):
                print(f"delete {run.namespace}/{run.name}: {exc.status} {exc.reason}", flush=True)
        shutil.rmtree(run.dir, ignore_errors=True)

    def sync(self) -> None:
        found = kubeapi.plain_json(self.core.list_pod_for_all_namespaces, field_selector="spec.nodeName!=",
                                   resource_version="0")
        # models only for the pods this kubelet runs: kwok's (most, at scale) are skipped as JSON
        pods: list[Any] = [self.api.deserialize(json.dumps(p), "V1Pod", "application/json")
                           for p in found.get("items") or [] if runs_here(p)]
        seen = set()
        for pod in pods:
            if nodefs.ensure(self.lay.nodes, pod.spec.node_name, self.cfg.name) is None:
                continue
            uid = pod.metadata.uid
            seen.add(uid)
            run = self.pods.get(uid)
            if pod.metadata.deletion_timestamp is not None:
                if run is not None:
                    self.delete(run, float(pod.metadata.deletion_grace_period_seconds or 0))
                else:
                    self.delete(podrun.PodRun(uid, pod.metadata.namespace, pod.metadata.name, pod.spec.node_name, "",
                                       self.lay.node_dir(pod.spec.node_name) / "pods" / "gone", "Never"), 0)
                continue
            if run is None and time.monotonic() < self.retry_after.get(uid, 0.0):
                continue
            if run is None and (pod.status.phase or "Pending") in ("Pending", "Running"):
                try:
                    self.start_pod(pod)
                except (self.client.ApiException, errors.CatalogError, OSError) as exc:
                    why = f"{exc.status} {exc.reason}" if isinstance(exc, self.client.ApiException) else str(exc)
                    print(f"start {pod.metadata.namespace}/{pod.metadata.name}: {why}", flush=True)
                    failed = self.pods.pop(uid, None)
                    if failed is not None:
                        self.kill(failed, 0)
                    self.retry_after[uid] = time.monotonic() + 2.0
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
        self.pool.shutdown(wait=False, cancel_futures=True)


def _hook(spec: probes.Spec, ip: str, net: Any, pid: int) -> tuple[bool, str]:
    """One preStop handler: a probe handler run once (exec in the container, httpGet in the pod's
    network), or the sleep action."""
    if spec.kind == "sleep":
        time.sleep(spec.timeout)  # the handler itself is a sleep (lifecycle.preStop.sleep)
        return True, "slept"
    if spec.kind == "none":
        return False, "no handler the sim runs (tcpSocket is not a lifecycle handler)"
    return probes.run_once(spec, ip, net, pid)


def _close_started(cont: podrun.Container) -> None:
    if cont.started_fd is not None:
        os.close(cont.started_fd)
        cont.started_fd = None


def _stop(conts: list[podrun.Container], grace: float) -> None:
    """SIGTERM the containers' process groups, SIGKILL what is left after ``grace`` seconds.

    Waits on each container's own Popen (never a wait for any child, which would swallow the
    exit code of another pod's container the next poll is about to read)."""
    live = [(c.popen, c.rec) for c in conts if c.popen is not None and c.rec is not None and c.popen.poll() is None]
    for _, rec in live:
        procs.signal_group(rec, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for popen, rec in live:
        try:
            popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        except executor.TimeoutExpired:
            procs.signal_group(rec, signal.SIGKILL)
            popen.wait()


def main(argv: list[str] | None = None) -> int:
    import urllib3

    ap = argparse.ArgumentParser(prog="sim-kubelet")
    ap.add_argument("--state", required=True, type=Path)
    args = ap.parse_args(argv)
    lay = Layout(args.state)
    cfg = ClusterConfig.load(lay.config)
    # pod processes of an earlier kubelet of this cluster (a crash): end them (pause processes too,
    # so their network namespaces go), they restart fresh
    procs.stop(procs.read_all_pods(lay.nodes), grace=2.0)
    netns.clear(lay.root)
    kubelet = Kubelet(lay, cfg)
    stopping = False
    try:
        kubelet.ensure_logs_crd()
    except (kubelet.client.ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
        print(f"Logs CRD not created ({exc}); kubectl logs will not work for sim pods", flush=True)

    api_server = None
    if "kubelet" in cfg.ports:  # a cluster made before the kubelet API advertises kwok's own port
        pki = pki_mod.Pki(lay.pki)
        api_server = kubeletapi.Server(cfg.ports["kubelet"], pki.crt("kubelet-server"), pki.key("kubelet-server"),
                                       pki.ca_crt, cfg.ports["kwok"], kubelet.exec_target)
        api_server.start()

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
        kubelet.wait_for_starts(POLL_S)
    if api_server is not None:
        api_server.close()
    kubelet.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
