"""``kubectl logs`` (and ``--previous``) for sim-kubelet pods, served by kwok's kubelet API.

kwok already serves ``/containerLogs/<ns>/<pod>/<container>`` on the nodes it manages (the API
server reaches it at the node's InternalIP and kubelet port, see :mod:`.controlplane`), reading
the file a ``Logs`` object (``kwok.x-k8s.io/v1alpha1``, one per pod, named after it) names for
the container: ``logsFile``, and ``previousLogsFile`` for ``--previous``. kwok reads those files
in the CRI log format (``<RFC 3339 time> stdout F <line>``), as a kubelet reads a runtime's.

So the sim kubelet, per container instance, turns the process's raw output (``<pod folder>/
<container>.log``, all instances appended, which ``collect_logs`` keeps as it is) into
``<pod folder>/logs/<container>/<restart count>.log`` in that format (:class:`ContainerLog`,
pumped on every kubelet poll, so a line shows within about half a second, stamped with the time
it was read; stdout and stderr arrive merged and are both tagged ``stdout``), and keeps the
pod's ``Logs`` object (:func:`logs_object`, owned by the pod so it goes with it) pointing at the
current and the previous instance's file. The ``Logs`` CRD itself is :func:`crd`, created by the
sim kubelet when it starts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

GROUP, VERSION, PLURAL = "kwok.x-k8s.io", "v1alpha1", "logs"


def crd() -> dict[str, Any]:
    """The ``Logs`` CustomResourceDefinition kwok's ``--enable-crds=Logs`` watches."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": "Logs", "listKind": "LogsList", "plural": PLURAL, "singular": PLURAL},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }],
        },
    }


def _stamp() -> bytes:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()


class ContainerLog:
    """One container's CRI-format log files, fed from its raw output file."""

    def __init__(self, raw: Path, folder: Path) -> None:
        self.raw = raw  # <pod folder>/<container>.log
        self.folder = folder  # <pod folder>/logs/<container>/
        self.offset = 0
        self.restart = 0
        self.pending = b""  # a line not yet ended by a newline

    @property
    def current(self) -> Path:
        return self.folder / f"{self.restart}.log"

    @property
    def previous(self) -> Path | None:
        return self.folder / f"{self.restart - 1}.log" if self.restart else None

    def start(self, restart: int) -> None:
        """A new instance (restart count ``restart``) is about to append to the raw file."""
        self.pump(final=True)
        self.restart = restart
        self.offset = self.raw.stat().st_size if self.raw.exists() else 0
        self.folder.mkdir(parents=True, exist_ok=True)
        self.current.touch()

    def pump(self, final: bool = False) -> None:
        """Append what the instance wrote since the last pump (``final``: its last line too)."""
        try:
            with open(self.raw, "rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
        except OSError:
            return
        self.offset += len(chunk)
        lines = (self.pending + chunk).split(b"\n")
        self.pending = lines.pop()
        if final and self.pending:
            lines.append(self.pending)
            self.pending = b""
        if lines:
            self.write(lines)

    def write(self, lines: list[bytes]) -> None:
        prefix = _stamp() + b" stdout F "
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.current, "ab") as out:
            out.write(b"".join(prefix + line + b"\n" for line in lines))


def logs_object(namespace: str, pod: str, pod_uid: str, logs: dict[str, ContainerLog]) -> dict[str, Any]:
    """The pod's ``Logs`` object: per container, the current and previous instance's file."""
    entries = []
    for name, log in logs.items():
        entry: dict[str, Any] = {"containers": [name], "logsFile": str(log.current), "follow": True}
        if log.previous is not None:
            entry["previousLogsFile"] = str(log.previous)
        entries.append(entry)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Logs",
        "metadata": {"name": pod, "namespace": namespace, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": pod_uid}]},
        "spec": {"logs": entries},
    }
