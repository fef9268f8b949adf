"""The agent's and the controller's small read-only HTTP servers: ``GET`` on a fixed set of paths,
each answered by a function of no arguments, on a daemon thread so the work loop never waits.

Standard library only; no request body is read, no query string is honoured, nothing is written
by a request. The address is the one given (the chart passes the pod's own IP; a test, loopback).
Called by :mod:`health` (``/healthz``, ``/readyz``) and :mod:`metrics` (``/metrics``).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gpucatalog.gpuhealth.errors import ConfigError

# status code, content type, body
Answer = tuple[int, str, bytes]
Route = Callable[[], Answer]
TEXT = "text/plain; charset=utf-8"


def text(code: int, body: str, content_type: str = TEXT) -> Answer:
    return code, content_type, body.encode()


def parse_addr(value: str, flag: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8081`` or a bare IPv6 pod IP ``fd00::5:8081``) -> (host, port)."""
    host, sep, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{flag} {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8081")
    return host, int(port)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    routes: Mapping[str, Route]


class _V6Server(Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    server: Server

    def do_GET(self) -> None:
        route = self.server.routes.get(self.path.split("?", 1)[0])
        if route is None:
            code, ctype, body = text(404, f"not found; try {' or '.join(sorted(self.server.routes))}\n")
        else:
            code, ctype, body = route()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return  # a probe or a scrape every few seconds is not worth a log line


def serve(addr: str, flag: str, routes: Mapping[str, Route], name: str) -> Server:
    """Answer ``routes`` on ``addr`` in a daemon thread; the caller may ``shutdown()`` the server."""
    host, port = parse_addr(addr, flag)
    cls = _V6Server if ":" in host else Server
    try:
        server = cls((host, port), _Handler)
    except OSError as exc:
        raise ConfigError(f"{flag} {addr}: cannot listen there ({exc.strerror or exc})") from exc
    server.routes = dict(routes)
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server
