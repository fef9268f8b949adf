"""The persisted description of one sim cluster (``<state>/config.json``).

Written by ``cluster.up`` before the supervisor starts, read by the supervisor, the sim kubelet,
the node agent and ``status``/``inject-fault``. Plain JSON so a crashed run can still be
inspected and cleaned up by a later ``down``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESTART_POLICIES = ("always", "on-failure", "never")


@dataclass
class ClusterConfig:
    name: str
    # 127.<slot>.0.0/16 is this cluster's pod-IP range; distinct per running cluster.
    slot: int
    ports: dict[str, int]
    binaries: dict[str, str]
    # Restart policy of supervised processes: tests that kill a process on purpose pick "never"
    # to observe the failure, or "always" to observe recovery.
    restart: str = "always"
    max_restarts: int = 5
    python_path: str = ""
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> ClusterConfig:
        d = json.loads(path.read_text())
        return cls(**d)
