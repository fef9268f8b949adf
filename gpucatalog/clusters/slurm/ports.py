"""Free TCP ports on 127.0.0.1 for slurmctld, each slurmd, slurmdbd and MariaDB.

Called by :mod:`.cluster`. Ports are probed by binding and released just before the daemons
start, so a collision with another process is possible but rare; the daemon then fails fast
and the cluster start reports its log.
"""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports (held open together so they differ)."""
    with ExitStack() as stack:
        ports: list[int] = []
        for _ in range(count):
            s = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports
