"""Free loopback ports for the processes of a sim cluster.

Every server of the sim cluster binds 127.0.0.1; ports are picked free at ``up`` (the kernel
chooses them), or given by the user, in which case a port already taken is bad input.
"""

from __future__ import annotations

import socket

from gpucatalog.core import errors


def in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports, held open together so the kernel cannot repeat one."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def require_free(port: int, what: str) -> int:
    if not 1024 <= port <= 65535:
        raise errors.InputError(f"port {port} out of range", field=what, expected="1024-65535")
    if in_use(port):
        raise errors.ConflictError(f"port 127.0.0.1:{port} is already in use", field=what, expected="a free port")
    return port


def wait_listening(port: int, host: str = "127.0.0.1") -> bool:
    """True if something accepts TCP connections on host:port right now."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
