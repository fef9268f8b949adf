"""What the sim kubelet knows about a pod it runs, and the pod status it reports from that.

``PodRun`` / ``Container`` hold the live state (processes, restarts, probes, log files, network
namespace); :func:`status` turns it into the ``status`` of the Pod object (phase, conditions,
container statuses) and :func:`digest` into the short form the kubelet compares to report only
changes. Used by :mod:`.kubelet`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpucatalog.clusters.sim import netns, podlogs, podspec, probes, procs


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Container:
    name: str
    image: str
    argv: list[str]
    spec: Any = None  # the V1Container
    rec: procs.PidRecord | None = None
    popen: Any = None
    restarts: int = 0
    state: str = "waiting"  # waiting | created (launcher not yet exec'd) | running | terminated
    reason: str = "ContainerCreating"
    exit_code: int | None = None
    started_at: str = ""
    finished_at: str = ""
    last: dict[str, Any] | None = None
    next_start: float = 0.0
    message: str = ""
    probes: probes.ContainerProbes | None = None  # of the running instance
    log: podlogs.ContainerLog | None = None
    started_fd: int | None = None  # read end of the launcher's exec pipe while it is "created"

    @property
    def ready(self) -> bool:
        return self.state == "running" and (self.probes is None or self.probes.ready)

    def state_doc(self) -> dict[str, Any]:
        if self.state == "running":
            return {"running": {"startedAt": self.started_at}}
        if self.state == "terminated":
            done = {"exitCode": self.exit_code, "reason": self.reason, "startedAt": self.started_at,
                    "finishedAt": self.finished_at}
            return {"terminated": {**done, "message": self.message} if self.message else done}
        return {"waiting": {"reason": self.reason, "message": self.message}}


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
    net: netns.PodNet | None = None  # None: hostNetwork (or not made yet)
    pause: Any = None  # the Popen holding ``net``
    logs: dict[str, podlogs.ContainerLog] = field(default_factory=dict)  # container -> its log files
    logs_reported: str = ""  # the Logs object's spec last written (kubectl logs)
    token: str | None = None  # the pod's ServiceAccount token (projected volumes get it again on refresh)
    next_refresh: float = 0.0  # when its ConfigMap/Secret/projected volumes are compared next

    @property
    def place(self) -> podspec.PodPlace:
        return podspec.PodPlace(node=self.node, ip=self.ip, dir=self.dir, net=self.net)


def status(run: PodRun) -> dict[str, Any]:
    """The Pod ``status`` the real processes show."""
    statuses = []
    for c in run.containers:
        s: dict[str, Any] = {
            "name": c.name, "image": c.image, "imageID": f"sim://{c.image}",
            "containerID": f"sim://{c.rec.pid if c.rec else 0}", "ready": c.ready,
            "started": c.state == "running", "restartCount": c.restarts, "state": c.state_doc(),
        }
        if c.last:
            s["lastState"] = c.last
        statuses.append(s)
    all_ready = all(c.ready for c in run.containers)
    if all(c.state == "terminated" for c in run.containers):
        phase = "Succeeded" if all(c.exit_code == 0 for c in run.containers) else "Failed"
    else:
        phase = "Running" if any(c.state in ("running", "terminated") or c.restarts for c in run.containers) else "Pending"
    cond = "True" if all_ready else "False"
    return {
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


def digest(st: dict[str, Any]) -> str:
    """What must change for a status to be worth reporting again."""
    ready = st["conditions"][-1]["status"]
    return json.dumps([st["phase"], ready, [(s["restartCount"], s["ready"], list(s["state"]))
                                           for s in st["containerStatuses"]]])
