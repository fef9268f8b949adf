"""The API server's "cluster" egress: an HTTP CONNECT proxy on a Unix socket.

Why: Endpoints and EndpointSlices may not hold loopback addresses (API validation), so sim-kubelet
pods get routable-looking pod IPs from ``POD_NET`` (100.64.0.0/16) in the API, while their
processes live on the host at the matching loopback alias ``127.<slot>.x.y``. kube-apiserver is
started with an EgressSelectorConfiguration whose ``cluster`` selection (webhooks, aggregated
APIs, kubelet traffic) tunnels through this proxy, which maps ``100.64.x.y:port`` to
``127.<slot>.x.y:port`` and passes every other address through unchanged. Supervised process
(``python -m …sim.egress --state DIR``), started before the API server.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import sys
from pathlib import Path

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


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def handler(slot: int):  # type: ignore[no-untyped-def]
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
        target = loopback_of(host.strip("[]"), slot)
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(target, int(port)), timeout=10)
        except (OSError, ValueError, TimeoutError) as exc:
            writer.write(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{exc}".encode())
            writer.close()
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))

    return handle


async def serve(socket_path: Path, slot: int) -> None:
    socket_path.unlink(missing_ok=True)
    server = await asyncio.start_unix_server(handler(slot), path=str(socket_path))
    os.chmod(socket_path, 0o600)
    print(f"egress proxy on {socket_path}: {POD_NET} -> 127.{slot}.0.0/16", flush=True)
    async with server:
        await server.serve_forever()


def socket_path(lay: Layout) -> Path:
    return lay.root / "egress.sock"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sim-egress")
    ap.add_argument("--state", required=True, type=Path)
    args = ap.parse_args(argv)
    lay = Layout(args.state)
    cfg = ClusterConfig.load(lay.config)
    asyncio.run(serve(socket_path(lay), cfg.slot))
    return 0


if __name__ == "__main__":
    sys.exit(main())
