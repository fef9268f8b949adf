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
# a kubelet's node Lease duration: the sim's up to 1,000 nodes (``lease_seconds``)
KUBELET_LEASE_S = 40


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
    # kwok renews each node's Lease every quarter of this; the controller manager's grace period
    # follows it (``node_monitor_grace_s``). Longer for a large cluster (``lease_seconds``).
    node_lease_s: int = KUBELET_LEASE_S

    @property
    def node_monitor_grace_s(self) -> int:
        """Seconds without a Lease renewal before the controller manager marks a node NotReady."""
        return max(60, self.node_lease_s * 3 // 2)

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


# Lease renewals the cluster may cost per second at most: kwok renews every node's Lease four
# times per lease duration, and at 10,000 nodes a 40 s lease alone (1,000 renewals/s) would keep
# both cores of a small machine busy.
MAX_LEASE_RENEWALS_PER_S = 100


def lease_seconds(nodes: int) -> int:
    """The node Lease duration for a cluster of ``nodes``: 40 s (the kubelet's) up to 1,000 nodes,
    then long enough that renewals stay at ``MAX_LEASE_RENEWALS_PER_S``."""
    return max(KUBELET_LEASE_S, -(-4 * nodes // MAX_LEASE_RENEWALS_PER_S))
