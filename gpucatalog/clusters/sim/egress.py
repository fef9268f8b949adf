"""The API server's "cluster" egress: an HTTP CONNECT proxy on a Unix socket.

Why: sim-kubelet pods get pod IPs from ``POD_NET`` (100.64.0.0/16), each on the loopback of the
pod's own network namespace (:mod:`.netns`), which the host cannot route to. kube-apiserver is
started with an EgressSelectorConfiguration whose ``cluster`` selection (webhooks, aggregated
APIs, kubelet traffic) tunnels through this proxy, which dials ``100.64.x.y:port`` from inside
that pod's namespace. A pod IP without a namespace (a ``hostNetwork`` pod) maps to its loopback
alias ``127.<slot>.x.y`` on the host; every other address passes through unchanged. Supervised
process (``python -m …sim.egress --state DIR``), started before the API server; it also runs
the pods' relays to the host (:mod:`.relay`).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import sys
from pathlib import Path

from gpucatalog.clusters.sim import netns, relay
from gpucatalog.clusters.sim.config import ClusterConfig
from gpucatalog.clusters.sim.layout import Layout

POD_NET = ipaddress.ip_network("100.64.0.0/16")


def pod_ip(n: int) -> str:
    """The n-th sim-kubelet pod IP (n >= 1) as the API sees it."""
    return str(POD_NET.network_address + n)


def loopback_of(ip: str, slot: int) -> str:
    """Where a pod IP's process actually listens: 100.64.x.y -> 127.<slot>.x.y; others unchanged."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return ip
    if addr not in POD_NET:
        return ip
    off = int(addr) - int(POD_NET.network_address)
    return f"127.{slot}.{(off >> 8) & 255}.{off & 255}"


def egress_config(socket_path: Path) -> str:
    return (
        "apiVersion: apiserver.k8s.io/v1beta1\n"
        "kind: EgressSelectorConfiguration\n"
        "egressSelections:\n"
        "- name: cluster\n"
        "  connection:\n"
        "    proxyProtocol: HTTPConnect\n"
        "    transport:\n"
        "      uds:\n"
        f"        udsName: {socket_path}\n"
    )


async def _dial(state_root: Path, slot: int, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    net = netns.lookup(state_root, host)
    if net is None:
        return await asyncio.open_connection(loopback_of(host, slot), port)
    sock = netns.socket_in(net)  # connect from inside the pod's namespace, to its pod IP
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, port))
    except OSError:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


def handler(slot: int, state_root: Path):  # type: ignore[no-untyped-def]
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.close()
            return
        line = head.split(b"\r\n", 1)[0].decode(errors="replace").split()
        if len(line) < 2 or line[0] != "CONNECT":
            writer.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            writer.close()
            return
        host, _, port = line[1].rpartition(":")
        try:
            up_r, up_w = await asyncio.wait_for(_dial(state_root, slot, host.strip("[]"), int(port)), timeout=10)
        except (OSError, ValueError, TimeoutError) as exc:
            writer.write(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{exc}".encode())
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(relay.pipe(reader, up_w), relay.pipe(up_r, writer))

    return handle


async def serve(lay: Layout, cfg: ClusterConfig) -> None:
    path = socket_path(lay)
    path.unlink(missing_ok=True)
    server = await asyncio.start_unix_server(handler(cfg.slot, lay.root), path=str(path))
    os.chmod(path, 0o600)
    print(f"egress proxy on {path}: {POD_NET} -> pod network namespaces (hostNetwork: 127.{cfg.slot}.0.0/16)",
          flush=True)
    async with server:
        await asyncio.gather(server.serve_forever(), relay.Relay(lay, cfg).serve())


def socket_path(lay: Layout) -> Path:
    return lay.root / "egress.sock"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sim-egress")
    ap.add_argument("--state", required=True, type=Path)
    args = ap.parse_args(argv)
    lay = Layout(args.state)
    cfg = ClusterConfig.load(lay.config)
    asyncio.run(serve(lay, cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
