"""Where one local Slurm cluster keeps its files: every path lives under one state folder.

Called by :mod:`.config` (paths written into slurm.conf), :mod:`.cluster` (creating folders) and
:mod:`.cleanup` (removing them). Keeping everything under one root is what lets ``stop`` remove a
cluster completely, also after a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def gres_conf(self) -> Path:
        return self.etc / "gres.conf"

    @property
    def slurmdbd_conf(self) -> Path:
        # slurmdbd looks for slurmdbd.conf beside $SLURM_CONF.
        return self.etc / "slurmdbd.conf"

    @property
    def state(self) -> Path:
        return self.root / "state"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def munge(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge / "munged.sock"

    @property
    def mysql(self) -> Path:
        return self.root / "mysql"

    @property
    def mysql_socket(self) -> Path:
        return self.root / "run" / "mysqld.sock"

    @property
    def pids(self) -> Path:
        """Every process started for this cluster (name, pid, start time): read by cleanup."""
        return self.root / "pids.json"

    def folders(self) -> list[Path]:
        return [self.etc, self.state, self.spool, self.log, self.run, self.dev, self.munge]
