"""Where a sim cluster keeps its state: one folder per cluster name.

``$GPU_CATALOG_CACHE/clusters/<name>/`` (default ``~/.cache/gpu-catalog/clusters/<name>``) holds
the generated PKI, kubeconfigs, etcd data, one log and one pid file per process, the node
folders and the supervisor's ``state.json``. Used by every module of the sim provider.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpucatalog.core import errors
from gpucatalog.toolchain import build

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")


# The kind provider keeps its clusters' state beside the sim's, as kind-<name>.
KIND_STATE_PREFIX = "kind-"


def check_name(name: str) -> str:
    if not _NAME.match(name) or name.startswith(KIND_STATE_PREFIX):
        raise errors.InputError(
            f"invalid cluster name {name!r}", field="--name",
            expected=f"1-32 chars of a-z, 0-9 and '-', not starting with {KIND_STATE_PREFIX!r} (kind's state folders)",
        )
    return name


def clusters_root() -> Path:
    return build.cache_root() / "clusters"


@dataclass(frozen=True)
class Layout:
    """Paths of one cluster's state folder."""

    root: Path

    @classmethod
    def of(cls, name: str) -> Layout:
        return cls(clusters_root() / check_name(name))

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def nodes(self) -> Path:
        return self.root / "nodes"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig handed to users, tests and ``catalog cluster up``'s last line."""
        return self.root / "kubeconfig"

    def component_kubeconfig(self, component: str) -> Path:
        return self.root / "kubeconfigs" / f"{component}.kubeconfig"

    @property
    def image_map(self) -> Path:
        """The cluster's image-map overlay with its facts (``imagemap.save``), when it has one."""
        return self.root / "image-map.json"

    @property
    def image_map_refused(self) -> Path:
        """Starts the sim kubelet refused because a mapped executable changed after load (JSON lines)."""
        return self.root / "image-map-refused.jsonl"

    @property
    def kwok_config(self) -> Path:
        return self.root / "kwok.yaml"

    def node_dir(self, node: str) -> Path:
        return self.nodes / node

    @property
    def slurm(self) -> Path:
        """State folder of the cluster's Slurm cluster, when a bundle brought one (``start_services``)."""
        return self.root / "slurm"

    @property
    def slurm_conf(self) -> Path:
        """Its ``slurm.conf`` (the Slurm state layout's ``etc/slurm.conf``)."""
        return self.slurm / "etc" / "slurm.conf"
