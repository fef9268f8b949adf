"""The ``kubeconfig`` provider: an existing (real GPU) cluster reached through a kubeconfig.

It never creates or deletes a cluster: ``up`` only checks the file, ``down`` does nothing.
``collect_logs`` dumps events and pod states for the evidence of a failed run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gpucatalog.clusters import provider
from gpucatalog.core import errors, kubeapi


class KubeconfigCluster(provider.ClusterProvider, provider.ExplainsUnavailable):
    kind = "kubeconfig"

    def __init__(self, kubeconfig: Path | None) -> None:
        if kubeconfig is None:
            raise errors.InputError("the kubeconfig provider needs a file", field="--cluster", expected="kubeconfig=PATH")
        self.path = kubeconfig
        self.name = str(kubeconfig)

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(kubeapi.client_for(self.path, retries=0))

    def reason(self) -> str:
        return f"kubeconfig {self.path} does not exist" if not self.path.is_file() else ""

    def available(self) -> bool:
        return self.path.is_file()

    def up(self, nodes: int, shape: str) -> Path:
        return self.kubeconfig()

    def wait_ready(self, timeout: float) -> None:
        """The API server answers and at least one node is Ready, within ``timeout``."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                nodes = self._core().list_node(_request_timeout=10).items
                if any(c.type == "Ready" and c.status == "True" for n in nodes for c in n.status.conditions or []):
                    return
                last = "no node is Ready"
            except (HTTPError, ApiException, OSError) as exc:
                last = f"API server unreachable: {exc}"
            time.sleep(2)
        raise errors.InputError(f"cluster of {self.path} not ready after {timeout:.0f}s: {last}", field="--cluster")

    def kubeconfig(self) -> Path:
        if not self.path.is_file():
            raise errors.NotFoundError(f"kubeconfig not found: {self.path}", field="--cluster")
        return self.path

    def collect_logs(self, dest: Path) -> Path:
        dest.mkdir(parents=True, exist_ok=True)
        core = self._core()
        events = [
            {"ns": e.metadata.namespace, "object": f"{e.involved_object.kind}/{e.involved_object.name}",
             "reason": e.reason, "message": e.message, "count": e.count}
            for e in core.list_event_for_all_namespaces().items
        ]
        pods = [
            {"ns": p.metadata.namespace, "name": p.metadata.name, "phase": p.status.phase, "node": p.spec.node_name}
            for p in core.list_pod_for_all_namespaces().items
        ]
        (dest / "events.json").write_text(json.dumps(events, indent=1, default=str))
        (dest / "pods.json").write_text(json.dumps(pods, indent=1, default=str))
        return dest

    def down(self) -> None:
        """Never deletes a cluster it did not create."""
