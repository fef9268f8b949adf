"""The cluster's own munged: a fresh key and a socket under the state folder.

Slurm 22.05 authenticates with munge; a private munged per cluster keeps clusters (and the
host's own munge, if any) apart. Called by :mod:`.cluster`.
"""

from __future__ import annotations

import os
import secrets

from gpucatalog.clusters.slurm.layout import Layout
from gpucatalog.clusters.slurm.processes import Supervisor


def start(sup: Supervisor, layout: Layout) -> None:
    # munged refuses a socket folder others cannot traverse ("execute permissions").
    layout.munge.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.munge, 0o755)
    key = layout.munge / "munge.key"
    if not key.exists():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(1024))
    sup.start(
        "munged",
        [
            "munged", "--foreground", "--force",
            f"--socket={layout.munge_socket}",
            f"--key-file={key}",
            f"--pid-file={layout.munge / 'munged.pid'}",
            f"--log-file={layout.log / 'munged.log'}",
            f"--seed-file={layout.munge / 'munged.seed'}",
        ],
        layout.log / "munged.out",
    )
