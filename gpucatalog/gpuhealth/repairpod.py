"""``gpu-health repair-pod``: a repair run by a pod on the broken node itself, as a site's GPU
reset (``nvidia-smi -r`` in a pod on the node) or its reboot job would be run.

A ``command`` actuator hook (:mod:`.actuator`): the controller runs it for an action, and its
exit status is the repair's. It creates the pod, waits for it and removes it. The pod is the
chart's verification template (image, service account, pod security context, priority and
runtime class, env), pinned to the node as the verification pod is. Its one container runs the
argv after ``--`` instead of the probes, with only the ``--host-path`` folders mounted, writable,
since a repair changes the node. The repair succeeded when the container exited 0 within
``--timeout``. Its termination message (the log's tail, by ``FallbackToLogsOnError``, so no
``pods/log`` permission is needed) is printed, and the controller records it as the detail::

    actuator:
      kind: command
      commands:
        RESET_GPU: [python3, -m, gpucatalog.gpuhealth.main, repair-pod, --node, "{node}",
                    --action, "{action}", "--reason={reason}", --host-path, /dev, --privileged, --,
                    nvidia-smi, -r]

It runs in the controller's container, whose Role already lets it create, read and delete pods
in its own namespace (the verification pods).
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucatalog.gpuhealth import kube
from gpucatalog.gpuhealth.errors import ConfigError, RemediationError
from gpucatalog.gpuhealth.xidpolicy import Action

PREFIX = "gpu-health-repair-"
SUCCEEDED = "succeeded"
FAILED = "failed"
POLL_S = 0.5


@dataclass
class PodActuator:
    api: kube.Api
    namespace: str
    template_configmap: str
    # the repair's final argv per action: the command actuator that runs this hook filled in its
    # placeholders already, so it is used as it is (formatting it again broke literal braces)
    commands: Mapping[str, Sequence[str]]
    pod: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = 300.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def repair(self, node: str, action: Action, reason: str) -> tuple[str, str]:
        argv = list(self.commands.get(action.name) or [])
        if not argv:
            return FAILED, f"no pod hook configured for {action.name}"
        name = PREFIX + node
        pods = f"/api/v1/namespaces/{self.namespace}/pods"
        try:
            cm = self.api.get(f"/api/v1/namespaces/{self.namespace}/configmaps/{self.template_configmap}")
            body = repair_pod(json.loads((cm.get("data") or {})["pod.json"]), node, self.namespace, argv,
                              action.name, reason, self.pod)
        except (KeyError, ValueError, kube.NotFound) as exc:
            return FAILED, f"no pod template in ConfigMap {self.template_configmap}: {exc}"
        deadline = self.clock() + self.timeout
        # a pod of the same name left by a repair that crashed mid-way is not this repair's result
        self.api.delete_pod(self.namespace, name, grace=0)
        while True:
            try:
                self.api.create(pods, body)
                break
            except kube.Conflict:  # the old pod is still going away
                if self.clock() >= deadline:
                    return FAILED, f"repair pod {name}: an earlier pod of that name was still terminating after {self.timeout:g}s"
                self.sleep(POLL_S)
        try:
            return self._await(f"{pods}/{name}", name, deadline)
        finally:
            try:
                self.api.delete_pod(self.namespace, name, grace=0)
            except RemediationError:
                pass  # the next repair of this node deletes it first

    def _await(self, path: str, name: str, deadline: float) -> tuple[str, str]:
        phase = "Pending"
        while self.clock() < deadline:
            status = self.api.get(path).get("status") or {}
            phase = str(status.get("phase", "Pending"))
            if phase in ("Succeeded", "Failed"):
                term = _terminated(status)
                code = term.get("exitCode", "?")
                detail = str(term.get("message") or term.get("reason") or status.get("reason") or "").strip()
                return (SUCCEEDED if phase == "Succeeded" else FAILED), f"pod {name} exit {code}: {detail[-300:]}"
            self.sleep(POLL_S)
        return FAILED, f"repair pod {name} did not finish within {self.timeout:g}s (phase {phase})"


def _terminated(status: Mapping[str, Any]) -> dict[str, Any]:
    for cs in status.get("containerStatuses") or []:
        term = (cs.get("state") or {}).get("terminated")
        if term:
            return dict(term)
    return {}


def repair_pod(template: dict[str, Any], node: str, namespace: str, argv: Sequence[str], action: str,
               reason: str, pod_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The repair workload: the verification template's pod and image, pinned to ``node``
    (bypassing the scheduler, so the cordon does not keep it off), never restarted, its one
    container running ``argv`` with the configured host paths mounted writable."""
    src = copy.deepcopy(template)
    spec_src = src.get("spec") or {}
    containers = spec_src.get("containers") or []
    if not containers:
        raise ValueError("the pod template has no container")
    base = containers[0]
    privileged = bool(pod_cfg.get("privileged", False))
    security: dict[str, Any] = {"allowPrivilegeEscalation": privileged, "readOnlyRootFilesystem": True,
                                "privileged": privileged}
    if not privileged:
        security["capabilities"] = {"drop": ["ALL"]}
    if "runAsUser" in pod_cfg:
        uid = int(pod_cfg["runAsUser"])
        security.update(runAsUser=uid, runAsGroup=uid)
        if uid != 0:
            security["runAsNonRoot"] = True
    volumes, mounts = [], []
    for vol_name, hp in sorted((pod_cfg.get("hostPaths") or {}).items()):
        volumes.append({"name": f"repair-{vol_name}", "hostPath": {"path": hp["path"], "type": hp.get("type", "")}})
        mounts.append({"name": f"repair-{vol_name}", "mountPath": hp.get("mountPath", hp["path"])})
    container = {
        "name": "repair",
        "image": base["image"],
        "imagePullPolicy": base.get("imagePullPolicy", "IfNotPresent"),
        "command": list(argv),
        # the template's env (NVIDIA_VISIBLE_DEVICES=all: the NVIDIA runtime gives the pod the
        # node's GPUs and driver tools, which a reset needs) plus what the repair is about
        "env": [e for e in base.get("env") or [] if e.get("name") not in ("NODE_NAME", "GPU_HEALTH_ACTION",
                                                                           "GPU_HEALTH_REASON")]
        + [{"name": "NODE_NAME", "value": node}, {"name": "GPU_HEALTH_ACTION", "value": action},
           {"name": "GPU_HEALTH_REASON", "value": reason[:1000]}],
        "securityContext": security,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }
    if base.get("resources"):
        container["resources"] = base["resources"]
    spec: dict[str, Any] = {k: v for k, v in spec_src.items()
                            if k in ("serviceAccountName", "securityContext", "priorityClassName",
                                     "runtimeClassName", "imagePullSecrets")}
    spec.update(nodeName=node, restartPolicy="Never", tolerations=[{"operator": "Exists"}],
                containers=[container], volumes=volumes)
    labels = dict((src.get("metadata") or {}).get("labels") or {})
    labels["app.kubernetes.io/component"] = "repair"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": PREFIX + node, "namespace": namespace, "labels": labels},
            "spec": spec}


def add_parser(sub: Any) -> None:
    """The ``repair-pod`` subcommand of ``gpu-health``."""
    import argparse

    rp = sub.add_parser(
        "repair-pod", help="an actuator hook: run a repair in a pod on the node, exit 0 when it succeeded",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="example: gpu-health repair-pod --node gpu-3 --action RESET_GPU --host-path /var/lib/node "
                    "--run-as-user 0 -- /var/lib/node/repair\n"
                    "The pod is the verification template's (ConfigMap --template-configmap) pinned to the node; "
                    "exit 0 when its container exited 0 within --timeout, 1 otherwise (the pod's message is printed).")
    rp.add_argument("--node", required=True)
    rp.add_argument("--action", required=True, choices=[a.name for a in Action])
    rp.add_argument("--reason", default="")
    rp.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE") or None,
                    help="where the template is and the pod runs (default: $POD_NAMESPACE)")
    rp.add_argument("--template-configmap", default="gpu-health-verify")
    rp.add_argument("--host-path", action="append", default=[], metavar="DIR",
                    help="a host folder the repair changes, mounted writable at the same path (repeatable)")
    rp.add_argument("--run-as-user", type=int, default=None)
    rp.add_argument("--privileged", action="store_true")
    rp.add_argument("--timeout", type=float, default=240.0, help="seconds (keep it below the actuator's own)")
    rp.add_argument("argv", nargs="+", help="the repair command, after --")
    rp.set_defaults(fn=cmd_repair_pod)


def pod_config(a: Any) -> dict[str, Any]:
    """The pod settings of ``repair-pod``'s flags; a relative host path is refused."""
    bad = [p for p in a.host_path if not p.startswith("/")]
    if bad:
        raise ConfigError(f"--host-path needs an absolute folder: {', '.join(bad)}")
    cfg: dict[str, Any] = {"privileged": a.privileged,
                           "hostPaths": {f"p{i}": {"path": p, "type": "Directory", "mountPath": p}
                                         for i, p in enumerate(a.host_path)}}
    if a.run_as_user is not None:
        cfg["runAsUser"] = a.run_as_user
    return cfg


def cmd_repair_pod(a: Any) -> int:
    if not a.namespace:
        raise ConfigError("repair-pod needs --namespace (or $POD_NAMESPACE, which the chart sets)")
    act = PodActuator(kube.Api(kube.load(a.kubeconfig)), a.namespace, a.template_configmap,
                      {a.action: list(a.argv)}, pod_config(a), a.timeout)
    result, detail = act.repair(a.node, Action[a.action], a.reason)
    print(detail, flush=True)
    return 0 if result == SUCCEEDED else 1
