"""Relays that let a pod in its own network namespace reach the host's services on loopback.

A pod's kubeconfig and ``KUBERNETES_SERVICE_HOST``/``_PORT`` name ``127.0.0.1:<API server
port>``, as they name the host's API server; a Slurm client in a pod dials slurmctld at
``127.0.0.1:<port>``. Inside the pod's namespace nothing listens there, so for every live pod
namespace (:mod:`.netns` entries) this relay holds a listener on ``127.0.0.1:<port>`` *inside*
that namespace for each host port, and pipes each connection to ``127.0.0.1:<port>`` on the host.
Host ports: the API server's, plus those in ``<state>/host-ports.json`` (written by
:mod:`.services` when it starts Slurm).

Runs in the egress-proxy process (``egress.main``), which already sits between the API server
and the pods. The sim kubelet asks it to reconcile after adding or removing a pod namespace
(``request_sync``: one line over ``<state>/podnet.sock``, answered once the listeners exist, so
a container never starts before it can reach the API server); it also reconciles every 2 s.
Its listeners die with the process, and a namespace dies with its pause process, so ``down``
and crashes leave nothing behind.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

from gpucatalog.clusters.sim import netns
from gpucatalog.clusters.sim.config import ClusterConfig
from gpucatalog.clusters.sim.layout import Layout

RECONCILE_S = 2.0
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def control_path(lay: Layout) -> Path:
    return lay.root / "podnet.sock"


def host_ports_file(lay: Layout) -> Path:
    return lay.root / "host-ports.json"


def write_host_ports(lay: Layout, ports: dict[str, int]) -> None:
    """Add host services pods may reach at ``127.0.0.1:<port>`` (name -> port)."""
    path = host_ports_file(lay)
    known: dict[str, int] = json.loads(path.read_text()) if path.is_file() else {}
    known.update(ports)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(known))
    tmp.replace(path)


def request_sync(lay: Layout, timeout: float = 10.0) -> None:
    """Ask the relay to reconcile now; returns once it has (OSError when it is not running)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(control_path(lay)))
        s.sendall(b"sync\n")
        if s.recv(16) != b"ok\n":
            raise OSError("pod network relay did not confirm")


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def _to_host(port: int) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # made in the host's namespace
        up.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(up, ("127.0.0.1", port)), timeout=10)
        except (OSError, TimeoutError):
            up.close()
            writer.close()
            return
        up_r, up_w = await asyncio.open_connection(sock=up)
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    return handle


class Relay:
    """The listeners of every pod namespace, kept in line with the entries and host ports."""

    def __init__(self, lay: Layout, cfg: ClusterConfig) -> None:
        self.lay = lay
        self.cfg = cfg
        self.servers: dict[str, dict[int, asyncio.Server]] = {}  # pod IP -> host port -> listener
        self.holders: dict[str, int] = {}  # pod IP -> pause pid the listeners were made for
        self.lock = asyncio.Lock()

    def host_ports(self) -> set[int]:
        ports = {int(self.cfg.ports["apiserver"])}
        try:
            ports |= {int(p) for p in json.loads(host_ports_file(self.lay).read_text()).values()}
        except (OSError, ValueError):
            pass
        return ports

    async def reconcile(self) -> None:
        async with self.lock:
            nets = {n.ip: n for n in netns.all_entries(self.lay.root)}
            ports = self.host_ports()
            for ip in list(self.servers):
                net = nets.get(ip)
                if net is None or net.holder.pid != self.holders.get(ip):
                    for server in self.servers.pop(ip).values():
                        server.close()
                    self.holders.pop(ip, None)
            for ip, net in nets.items():
                have = self.servers.setdefault(ip, {})
                self.holders[ip] = net.holder.pid
                for port in sorted(ports - set(have)):
                    try:
                        have[port] = await self._listen(net, port)
                    except OSError as exc:  # the pod went away meanwhile, or it binds the port itself
                        print(f"relay {ip} 127.0.0.1:{port}: {exc}", flush=True)

    async def _listen(self, net: netns.PodNet, port: int) -> asyncio.Server:
        sock = netns.socket_in(net)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return await asyncio.start_server(_to_host(port), sock=sock)

    async def control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readline()
            await self.reconcile()
            writer.write(b"ok\n")
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve(self) -> None:
        path = control_path(self.lay)
        path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(self.control, path=str(path))
        path.chmod(0o600)
        async with server:
            while True:
                await self.reconcile()
                await asyncio.sleep(RECONCILE_S)
