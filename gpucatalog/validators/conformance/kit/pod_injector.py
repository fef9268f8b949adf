"""Fault injection on any cluster, through the Kubernetes API only: a short-lived privileged pod
pinned to the node runs ``gpu-health inject-xid`` (gpu-health's own image, as the bundle pinned
it) and writes one synthetic XID line into the node's kernel log, where gpu-health's agent reads
it. Used by ``catalog certify --inject-faults`` (an explicit opt-in: the faults are synthetic and
the evidence says so) as the ``inject_fault``/``clear_fault`` callables suites take.

What the pod mounts and runs is taken from the bundle's own gpu-health agent DaemonSet
(:func:`agent_template`): its image, its host root and kernel-log hostPath (mounted read-write
here, at the same place), its ``--nvidia-smi`` and runtime class (so the GPU index resolves to
the PCI bus id exactly as the agent resolves it). The pod runs as its own ServiceAccount with
no API token mounted, tolerates every taint (a cordoned node included), and is deleted once it
has finished.

Only XIDs can be written this way: other fault kinds (row remapping, PCIe, NVLink, InfiniBand)
are the driver's and the hardware's readings and raise ``CaseNotRun``. Clearing works where the
kernel log is a file (the sim cluster's node folders); a real kernel log keeps a synthetic XID
until the node's repair, and a clear asked for before that raises ``CaseNotRun``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from gpucatalog.validators.conformance.kit import base, kube_client

SERVICE_ACCOUNT = "gpu-catalog-fault-injector"
LABELS = {"app.kubernetes.io/name": "gpu-catalog-fault-injector", "app.kubernetes.io/managed-by": "gpu-catalog",
          "gpu-catalog.io/synthetic-fault": "true"}
CONTAINER = "inject"
# gpu-health's agent DaemonSet, as its chart labels it (the contract read here, not imported)
AGENT_LABELS = {"app.kubernetes.io/name": "gpu-health", "app.kubernetes.io/component": "agent"}
HOST_ROOT_DEFAULT = "/host"  # gpu-health's default --host-root
POLL_S = 0.5
ATTEMPTS = 3  # pods per injection when one is removed before it reported
# gpu-health's remediation state label on a Node (its contract, as remediation.contract writes it
# down) and the states in which it evicts every pod of the node, a Pending one whatever its budget
STATE_LABEL = "gpu-health.gpu-catalog.io/state"
EVICTING = ("quarantined", "draining")


class _GoneBeforeReport(base.CaseFailed):
    """The pod was deleted before its container's end was reported: it may or may not have run."""


@dataclass(frozen=True)
class AgentTemplate:
    """What the injector pod copies from gpu-health's agent DaemonSet."""

    namespace: str
    image: str
    host_root: str
    nvidia_smi: str | None
    kmsg_path: str | None  # the agent's --kmsg-path, when it sets one
    kmsg_volume: dict[str, Any]  # the hostPath volume holding the kernel log
    kmsg_mount: str  # where the agent mounts it
    runtime_class: str | None
    env: list[dict[str, Any]]


def _flag(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a.partition("=")[2]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def pinned(image: str) -> bool:
    """A digest, or a tag other than ``latest`` (a registry port is not a tag)."""
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    return ":" in last and last.rsplit(":", 1)[1] not in ("", "latest")


def agent_template(objects: list[dict[str, Any]]) -> AgentTemplate | None:
    """The injector's template from the rendered (or installed) objects: the DaemonSet labelled as
    gpu-health's agent; None when there is none. ValueError when it is there but unusable (an
    image not pinned, no hostPath volume holding the kernel log), naming what is wrong."""
    for o in objects:
        labels = (o.get("metadata") or {}).get("labels") or {}
        if o.get("kind") == "DaemonSet" and all(labels.get(k) == v for k, v in AGENT_LABELS.items()):
            return _template(o)
    return None


def _template(ds: dict[str, Any]) -> AgentTemplate:
    name = ds["metadata"]["name"]
    spec = ds["spec"]["template"]["spec"]
    c = spec["containers"][0]
    args = [str(a) for a in (c.get("command") or [])[1:] + (c.get("args") or [])]
    env = {e["name"]: e.get("value") for e in c.get("env") or [] if "value" in e}
    host_root = _flag(args, "--host-root") or env.get("GPU_HEALTH_HOST_ROOT") or HOST_ROOT_DEFAULT
    kmsg_path = _flag(args, "--kmsg-path")
    kmsg = kmsg_path or os.path.join(host_root, "dev/kmsg")
    image = str(c.get("image", ""))
    if not pinned(image):
        raise ValueError(f"DaemonSet {name}: image {image!r} is not pinned (a tag other than latest, or a digest)")
    host_volumes = {v["name"]: v for v in spec.get("volumes") or [] if "hostPath" in v}
    # the mount the agent reads the kernel log through: the deepest mountPath at or above it
    best: tuple[str, dict[str, Any]] | None = None
    for m in c.get("volumeMounts") or []:
        mp = str(m["mountPath"]).rstrip("/") or "/"
        if m["name"] in host_volumes and (kmsg == mp or kmsg.startswith(mp.rstrip("/") + "/")) and (
                best is None or len(mp) > len(best[0])):
            best = (mp, host_volumes[m["name"]])
    if best is None:
        raise ValueError(f"DaemonSet {name}: no hostPath volume is mounted where the agent reads the kernel log ({kmsg})")
    keep_env = [e for e in c.get("env") or [] if e.get("name") == "NVIDIA_VISIBLE_DEVICES" and "value" in e]
    return AgentTemplate(namespace=str(ds["metadata"].get("namespace") or "default"), image=image,
                         host_root=host_root, nvidia_smi=_flag(args, "--nvidia-smi"), kmsg_path=kmsg_path,
                         kmsg_volume={"name": "host-kmsg", "hostPath": dict(best[1]["hostPath"])},
                         kmsg_mount=best[0], runtime_class=spec.get("runtimeClassName"), env=keep_env)


def pod_manifest(agent: AgentTemplate, node: str, extra_args: list[str], what: str,
                 timeout_s: float = 120.0) -> dict[str, Any]:
    """The injector pod for ``node`` running ``gpu-health inject-xid`` + ``extra_args``."""
    a = agent
    args = ["inject-xid", f"--host-root={a.host_root}"]
    if a.nvidia_smi:
        args.append(f"--nvidia-smi={a.nvidia_smi}")
    if a.kmsg_path:
        args.append(f"--kmsg-path={a.kmsg_path}")
    spec: dict[str, Any] = {
        "nodeName": node,  # pinned: no scheduler, so a cordoned node gets it too
        "restartPolicy": "Never",
        "activeDeadlineSeconds": int(timeout_s) + 60,
        "serviceAccountName": SERVICE_ACCOUNT,
        "automountServiceAccountToken": False,  # it never talks to the API
        "enableServiceLinks": False,
        "tolerations": [{"operator": "Exists"}],  # cordoned, NoSchedule and NoExecute taints alike
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": CONTAINER, "image": a.image, "imagePullPolicy": "IfNotPresent",
            "args": args + extra_args, "env": a.env,
            # writing /dev/kmsg needs root and the device (a container's device cgroup allows
            # it only to a privileged one); nothing else of the host is mounted
            "securityContext": {"privileged": True, "runAsUser": 0, "readOnlyRootFilesystem": True},
            "volumeMounts": [{"name": a.kmsg_volume["name"], "mountPath": a.kmsg_mount}],
            "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }],
        "volumes": [a.kmsg_volume],
    }
    if a.runtime_class:
        spec["runtimeClassName"] = a.runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "generateName": "gpu-catalog-inject-", "namespace": a.namespace, "labels": dict(LABELS),
        "annotations": {
            "gpu-catalog.io/synthetic-fault": f"{what}: a test fault written by catalog certify --inject-faults, "
                                              "not a hardware error",
            "gpu-catalog.io/host-access.kmsg": f"{a.kmsg_volume['hostPath']['path']} (read-write): one synthetic "
                                               "NVRM Xid line where gpu-health's agent reads the kernel log"}},
        "spec": spec}


class PodInjector:
    """``inject_fault(node, kind, **kw)`` / ``clear_fault(node)`` through short-lived pods."""

    def __init__(self, kubeconfig: str | os.PathLike[str], agent: AgentTemplate, timeout_s: float = 120.0) -> None:
        self.kube = kube_client.Kube(kubeconfig)
        self.agent = agent
        self.timeout_s = timeout_s
        self._sa_ready = False
        self._sa_lock = threading.Lock()  # a suite may inject on several nodes at once
        self.runs: list[dict[str, Any]] = []  # every pod run: node, args, exit code, what it printed

    # -- the callables suites take ---------------------------------------------------------------
    def inject_fault(self, node: str, kind: str, **kw: Any) -> str:
        if kind == "clear":
            return self.clear_fault(node)
        if kind != "xid":
            raise base.CaseNotRun(f"{kind} needs the driver; the pod injector writes XID lines only")
        code, gpu = int(kw["code"]), int(kw.get("gpu", 0))
        # one id for every try: a retried pod finds the line a removed one wrote, not writing another
        rc, out = self._run(node, ["--code", str(code), "--gpu", str(gpu), "--injection", os.urandom(4).hex()],
                            f"XID {code} on GPU {gpu}")
        if rc != 0:
            raise base.CaseFailed(f"the fault injector pod on {node} failed (exit {rc}): {out[-400:]}")
        return f"{node}: {out.strip()}"

    def clear_fault(self, node: str) -> str:
        rc, out = self._run(node, ["--clear"], "clear synthetic XIDs")
        if rc == 2:
            raise base.CaseNotRun(f"{node}: the synthetic XID cannot be cleared without the node's repair: "
                                  f"{out.strip()[-400:]}")
        if rc != 0:
            raise base.CaseFailed(f"the fault clearing pod on {node} failed (exit {rc}): {out[-400:]}")
        return f"{node}: {out.strip()}"

    def close(self) -> None:
        """Remove the ServiceAccount and PodDisruptionBudget this injector made (its pods are gone already)."""
        if self._sa_ready:
            ns = self.agent.namespace
            self.kube.request("DELETE", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{SERVICE_ACCOUNT}",
                              ok404=True)
            self.kube.request("DELETE", f"/api/v1/namespaces/{ns}/serviceaccounts/{SERVICE_ACCOUNT}", ok404=True)
            self._sa_ready = False
        self.kube.close()

    def _ensure_service_account(self) -> None:
        with self._sa_lock:
            if self._sa_ready:
                return
            path = f"/api/v1/namespaces/{self.agent.namespace}/serviceaccounts"
            if not self.kube.request("GET", f"{path}/{SERVICE_ACCOUNT}", ok404=True):
                self.kube.request("POST", path, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {
                    "name": SERVICE_ACCOUNT, "labels": dict(LABELS)}, "automountServiceAccountToken": False})
            # a node drained for the very fault a pod just wrote (gpu-health, kubectl drain) must not
            # evict that pod before it has finished: no voluntary disruption of injector pods
            pdbs = f"/apis/policy/v1/namespaces/{self.agent.namespace}/poddisruptionbudgets"
            if not self.kube.request("GET", f"{pdbs}/{SERVICE_ACCOUNT}", ok404=True):
                self.kube.request("POST", pdbs, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {
                    "name": SERVICE_ACCOUNT, "labels": dict(LABELS)}, "spec": {
                    "maxUnavailable": 0, "selector": {"matchLabels": dict(LABELS)}}})
            self._sa_ready = True

    def _run(self, node: str, extra_args: list[str], what: str) -> tuple[int, str]:
        """Run one injector pod to its end: (exit code, output). A pod removed before it reported
        (a drain evicts a pod still Pending whatever its PodDisruptionBudget says, and such a pod
        may already have run) or killed by its removal before it finished (the budget's status can
        lag a pod just created) is tried again: injections carry an id and clears are idempotent,
        so a retry never writes a second fault."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return self._run_once(node, extra_args, what)
            except _GoneBeforeReport as exc:
                self.runs.append({"node": node, "args": extra_args, "removedBeforeItReported": str(exc),
                                  "attempt": attempt})
                if attempt == ATTEMPTS:
                    raise base.CaseFailed(f"{exc} ({ATTEMPTS} pods in a row)") from None
                # a node gpu-health is draining evicts each new pod while it is still Pending (a
                # PodDisruptionBudget protects only running pods), and every new pod keeps the
                # drain going: the next one goes once the drain has ended
                self._wait_drain_ended(node)
        raise AssertionError("unreachable")

    def _wait_drain_ended(self, node: str) -> None:
        """Until gpu-health no longer evicts the node's pods (at most ``timeout_s``; then the next
        pod is tried anyway)."""
        def ended() -> bool:
            n = self.kube.request("GET", f"/api/v1/nodes/{node}", ok404=True) or {}
            return ((n.get("metadata") or {}).get("labels") or {}).get(STATE_LABEL) not in EVICTING

        with contextlib.suppress(base.WaitTimeout):
            base.wait_for(f"gpu-health's drain of {node} to end", ended, self.timeout_s, interval=POLL_S)

    def _run_once(self, node: str, extra_args: list[str], what: str) -> tuple[int, str]:
        """Create the pod, wait for it to finish, read what it printed, delete it: (exit code, output)."""
        self._ensure_service_account()
        ns = self.agent.namespace
        body = pod_manifest(self.agent, node, extra_args, what, self.timeout_s)
        created = self.kube.request("POST", f"/api/v1/namespaces/{ns}/pods", body)
        name = created["metadata"]["name"]
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        t0 = time.monotonic()
        try:
            term, deleted = self._wait_terminated(ns, name, str(created["metadata"]["resourceVersion"]), node)
            rc = int(term.get("exitCode", -1))
            if deleted and rc != 0:
                # killed mid-run by a drain, most often one for the very fault it had just written:
                # a retry with the same injection id finds that line, or writes it
                raise _GoneBeforeReport(f"the fault injector pod on {node} was deleted (a drain of the node?) before "
                                        f"it finished: exit {rc} {term.get('reason') or ''}".rstrip())
            # a pod removed once it had finished (a drain for the very fault it wrote) took its log along
            out = ("" if deleted else self._output(ns, name)) or str(term.get("message") or "")
            self.runs.append({"node": node, "pod": name, "args": body["spec"]["containers"][0]["args"],
                              "exitCode": rc, "output": out.strip()[-400:], "deletedBeforeRead": deleted,
                              "seconds": round(time.monotonic() - t0, 2)})
            return rc, out
        finally:
            self.kube.request("DELETE", path, {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                              ok404=True)
            base.wait_for(f"fault injector pod {ns}/{name} deleted",
                          lambda: not self.kube.request("GET", path, ok404=True), 30)

    def _wait_terminated(self, ns: str, name: str, rv: str, node: str) -> tuple[dict[str, Any], bool]:
        """The container's terminated state, and whether the pod was deleted by then; CaseFailed
        early for a pod that cannot start or was deleted before it ran.

        A watch, not polling: a pod evicted while still reported Pending (the PodDisruptionBudget
        does not protect a pod not yet running) may have written its fault already, and only the
        DELETED event carries the terminal status its kubelet wrote just before removing it."""
        deadline = time.monotonic() + self.timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            w: Any = watch.Watch()  # type: ignore[no-untyped-call]  # the client ships no types here
            try:
                for ev in w.stream(self.kube.core.list_namespaced_pod, ns, field_selector=f"metadata.name={name}",
                                   resource_version=rv, allow_watch_bookmarks=False,
                                   timeout_seconds=max(1, int(deadline - time.monotonic()))):
                    pod = ev.get("raw_object") or {}
                    if ev.get("type") == "ERROR" or not pod.get("metadata"):
                        break
                    rv = str(pod["metadata"].get("resourceVersion") or rv)
                    last = pod.get("status") or {}
                    term = _terminated(last, node)
                    deleted = ev["type"] == "DELETED" or bool(pod["metadata"].get("deletionTimestamp"))
                    if term is not None and (ev["type"] == "DELETED" or not deleted):
                        return term, deleted
                    if ev["type"] == "DELETED":
                        raise _GoneBeforeReport(
                            f"the fault injector pod on {node} was deleted before it ran (a drain of the node?); "
                            f"last seen: {json.dumps({k: last.get(k) for k in ('phase', 'reason')})}")
            except (ApiException, urllib3.exceptions.HTTPError):
                pass  # an expired resource version or a dropped stream: read the pod and watch again
            finally:
                w.stop()
            pod = self.kube.request("GET", f"/api/v1/namespaces/{ns}/pods/{name}", ok404=True)
            if not pod:
                raise _GoneBeforeReport(f"the fault injector pod on {node} was deleted before it finished "
                                      f"(last seen: {json.dumps({k: last.get(k) for k in ('phase', 'reason')})})")
            rv, last = str(pod["metadata"]["resourceVersion"]), pod.get("status") or {}
            term = _terminated(last, node)
            if term is not None and not pod["metadata"].get("deletionTimestamp"):
                return term, False
            time.sleep(POLL_S)
        raise base.CaseFailed(f"the fault injector pod on {node} did not finish within {self.timeout_s:.0f}s: "
                              f"{json.dumps({k: last.get(k) for k in ('phase', 'reason', 'message')})}")

    def _output(self, ns: str, name: str) -> str:
        """What the container printed (the API's pod log; empty when the node serves none)."""
        for _ in range(6):
            try:
                text = str(self.kube.core.read_namespaced_pod_log(name, ns, container=CONTAINER))
            except (ApiException, urllib3.exceptions.HTTPError):
                text = ""  # not served (yet): a missing log is not the injection's failure
            if text.strip():
                return text
            time.sleep(POLL_S)
        return ""


def _terminated(status: dict[str, Any], node: str) -> dict[str, Any] | None:
    """The injector container's terminated state once the pod is done; CaseFailed for a pod that
    cannot start."""
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        if "terminated" in state and status.get("phase") in ("Succeeded", "Failed"):
            return dict(state["terminated"])
        reason = (state.get("waiting") or {}).get("reason", "")
        if reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                      "CreateContainerError", "StartError", "RunContainerError"):
            raise base.CaseFailed(f"the fault injector pod on {node} cannot start: {reason} "
                                  f"{(state.get('waiting') or {}).get('message', '')[:300]}")
    if status.get("phase") == "Failed" and not status.get("containerStatuses"):
        raise base.CaseFailed(f"the fault injector pod on {node} failed: {status.get('reason', '')} "
                              f"{status.get('message', '')[:300]}")
    return None
