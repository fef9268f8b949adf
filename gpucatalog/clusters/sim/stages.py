"""kwok's configuration for a sim cluster: options plus the Stage documents of ``data/``.

Called by ``cluster.up``; fills the sim-kubelet exclusion (a jq expression over container
images) into every pod Stage so kwok never touches pods the sim kubelet runs.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

from gpucatalog.clusters.sim import config, images

PLACEHOLDER = "__SIM_KUBELET_PODS__"


def render(heartbeat_s: float = 300.0, table: images.Table | None = None, lease_s: int = config.KUBELET_LEASE_S) -> str:
    """kwok.yaml text; ``heartbeat_s`` is the node status heartbeat period (Leases carry liveness,
    ``lease_s`` their duration); ``table`` the cluster's image map (default: this process's)."""
    stages = resources.files("gpucatalog.clusters.sim").joinpath("data/kwok-stages.yaml").read_text()
    expr = images.kwok_exclusion_jq(table)
    # the placeholder sits inside single quotes in YAML; double any single quote of the expression
    stages = stages.replace(PLACEHOLDER, expr.replace("'", "''"))
    ms = int(heartbeat_s * 1000)
    stages = stages.replace("__HEARTBEAT_MS__", str(ms)).replace("__HEARTBEAT_JITTER_MS__", str(ms + ms // 20))
    options = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            # node liveness through Leases, renewed well inside the controller manager's grace
            # period (config.ClusterConfig.node_monitor_grace_s)
            "nodeLeaseDurationSeconds": lease_s,
            "nodeLeaseParallelism": 16,
            "nodePlayStageParallelism": 16,
            "podPlayStageParallelism": 16,
            # kwok's kubelet API serves container logs (kubectl logs of sim-kubelet pods, see
            # podlogs); a config file that leaves it out reads as false
            "enableDebuggingHandlers": True,
        },
    }
    return yaml.safe_dump(options, sort_keys=False) + "---\n" + stages


def write(path: Path, heartbeat_s: float = 300.0, table: images.Table | None = None, lease_s: int = config.KUBELET_LEASE_S) -> Path:
    path.write_text(render(heartbeat_s, table, lease_s))
    return path
