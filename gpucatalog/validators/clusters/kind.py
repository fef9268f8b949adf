"""The ``kind`` provider: detection only on machines without a Docker engine.

kind needs a running Docker (or Podman) engine. Where there is none, ``available()`` is False
and ``reason()`` says why, so certification and tests skip it with that reason. Creating kind
clusters (multi-node config, fake-gpu-operator GPUs) is not implemented yet: no machine this
project runs on has had an engine to prove it against.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gpucatalog.catalog import errors, executor


class KindCluster:
    kind = "kind"

    def __init__(self, name: str) -> None:
        self.name = name

    def reason(self) -> str:
        if shutil.which("kind") is None:
            return "the kind binary is not installed"
        if shutil.which("docker") is None:
            return "no docker client"
        try:
            executor.run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=20)
        except errors.ToolError:
            return "no Docker engine is running (docker info failed)"
        return "creating kind clusters is not implemented yet"

    def available(self) -> bool:
        return False

    def _refuse(self) -> errors.InputError:
        return errors.InputError(f"kind provider unavailable: {self.reason()}", field="--cluster")

    def up(self, nodes: int, shape: str) -> Path:
        raise self._refuse()

    def wait_ready(self, timeout: float) -> None:
        raise self._refuse()

    def kubeconfig(self) -> Path:
        raise self._refuse()

    def collect_logs(self, dest: Path) -> Path:
        raise self._refuse()

    def down(self) -> None:
        raise self._refuse()
