"""The sim's kubelet API without a cluster: SPDY/3 framing (the header dictionary, compressed
header blocks shared across frames, DATA and FIN), exec request parsing, and a whole exec session
against a local process standing in for a container (its PID is this test's child), driven by a
SPDY client written here as the API server's would behave."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import ssl
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucatalog.clusters.sim import kubeletapi, pki, spdy
from gpucatalog.core import executor


def test_the_header_dictionary_is_spdy3s() -> None:
    assert len(spdy.DICTIONARY) == 1423
    assert hashlib.sha256(spdy.DICTIONARY).hexdigest() == "51d27341373f923f3cd88e1eb7162aeaa3723d7585ff2399201dc06498407f02"


class _Client:
    """The caller's side: opens streams with SYN_STREAM, reads replies and data."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.deflate = zlib.compressobj(zdict=spdy.DICTIONARY)
        self.session = spdy.Session(sock.recv, sock.sendall)  # reads with the server-side parser

    def syn(self, stream: int, headers: dict[str, list[str]]) -> None:
        block = self.deflate.compress(spdy.encode_headers(headers)) + self.deflate.flush(zlib.Z_SYNC_FLUSH)
        payload = struct.pack(">IIBB", stream, 0, 0, 0) + block
        self.sock.sendall(struct.pack(">II", 0x80000000 | 3 << 16 | spdy.SYN_STREAM, len(payload)) + payload)

    def data(self, stream: int, data: bytes, fin: bool = False) -> None:
        self.sock.sendall(struct.pack(">II", stream, (spdy.FLAG_FIN if fin else 0) << 24 | len(data)) + data)


def test_frames_round_trip_with_one_compression_stream_per_direction() -> None:
    a, b = socket.socketpair()
    with a, b:
        client, server = _Client(a), spdy.Session(b.recv, b.sendall)
        client.syn(1, {"streamtype": ["error"]})
        client.syn(3, {"streamtype": ["stdout"], "x-many": ["1", "2"]})
        first, second = server.read_frame(), server.read_frame()
        assert (first.kind, first.stream, first.headers) == (spdy.SYN_STREAM, 1, {"streamtype": ["error"]})
        assert second.headers == {"streamtype": ["stdout"], "x-many": ["1", "2"]}  # decoded with the same stream
        server.reply(1)
        server.reply(3)
        server.data(3, b"out")
        server.data(3, b"", fin=True)
        frames = [client.session.read_frame() for _ in range(4)]
        assert [(f.kind, f.stream) for f in frames[:2]] == [(spdy.SYN_REPLY, 1), (spdy.SYN_REPLY, 3)]
        assert (frames[2].control, frames[2].payload, frames[2].fin) == (False, b"out", False)
        assert (frames[3].payload, frames[3].fin) == (b"", True)


def test_not_spdy3_is_a_protocol_error() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">II", 0x80000000 | 2 << 16 | spdy.SYN_STREAM, 0))
        with pytest.raises(spdy.ProtocolError, match="version 2"):
            spdy.Session(b.recv, b.sendall).read_frame()


@pytest.mark.parametrize("path, want", [
    ("/exec/ns/pod/main?command=sh&command=-c&command=echo+hi&output=1&error=1",
     ("ns", "pod", "main", ["sh", "-c", "echo hi"], False, True, True, False, 3)),
    ("/exec/ns/pod/0c1e/main?command=cat&input=1&output=1&tty=1&error=1",
     ("ns", "pod", "main", ["cat"], True, True, False, True, 4)),  # a TTY has no stderr, and a resize stream
])
def test_exec_paths(path: str, want: tuple[object, ...]) -> None:
    r = kubeletapi.ExecRequest.parse(path)
    assert r is not None
    assert (r.namespace, r.pod, r.container, r.command, r.stdin, r.stdout, r.stderr, r.tty, r.streams) == want


@pytest.mark.parametrize("path", ["/containerLogs/ns/pod/main", "/healthz", "/exec/ns", "/execx/a/b/c"])
def test_other_paths_are_not_exec(path: str) -> None:
    assert kubeletapi.ExecRequest.parse(path) is None


# -- a whole session ---------------------------------------------------------------------------------
@pytest.fixture()
def served(tmp_path: Path) -> Iterator[tuple[int, pki.Pki, dict[str, object]]]:
    keys = pki.generate(tmp_path / "pki")
    kwok = _fake_kwok(keys)
    # stands in for a container: a process of ours, so nsenter enters namespaces we already share
    container = executor.piped(["sleep", "60"], env={"WHO": "the container", "PATH": "/usr/bin:/bin"},
                               stdin=False, merge_stderr=True)
    targets: dict[str, object] = {"main": kubeletapi.Target(container.pid), "stopped": "container is not running"}
    port = _free_port()
    server = kubeletapi.Server(port, keys.crt("kubelet-server"), keys.key("kubelet-server"), keys.ca_crt, kwok,
                               lambda ns, pod, c: targets.get(c))  # type: ignore[arg-type,return-value]
    server.start()
    try:
        yield port, keys, targets
    finally:
        server.close()
        container.kill()
        container.wait()
        assert container.stdout is not None
        container.stdout.close()


def _fake_kwok(keys: pki.Pki) -> int:
    """kwok's server as the relay meets it: TLS, one answer per connection, then closed."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(keys.crt("kubelet-server"), keys.key("kubelet-server"))
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            raw, _ = listener.accept()
            with ctx.wrap_socket(raw, server_side=True) as conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                body = b"kwok saw " + head.split(b" ")[1]
                conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    threading.Thread(target=serve, daemon=True).start()
    return int(listener.getsockname()[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _connect(port: int, keys: pki.Pki, client_cert: bool = True) -> ssl.SSLSocket:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(keys.ca_crt)
    ctx.check_hostname = False
    if client_cert:
        ctx.load_cert_chain(keys.crt("apiserver-kubelet-client"), keys.key("apiserver-kubelet-client"))
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=20))


def _upgrade(sock: ssl.SSLSocket, path: str) -> bytes:
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                 "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: channel.k8s.io\r\n\r\n"
                 .encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    return head


@pytest.mark.skipif(os.geteuid() != 0, reason="nsenter needs root")
def test_an_exec_session_streams_stdin_and_output_and_reports_the_exit_code(
        served: tuple[int, pki.Pki, dict[str, object]]) -> None:
    port, keys, _ = served
    with _connect(port, keys) as sock:
        head = _upgrade(sock, "/exec/ns/pod/main?command=sh&command=-c&command=cat%3B+echo+%24WHO+%3E%262%3B+exit+4"
                              "&input=1&output=1&error=1")
        assert head.startswith(b"HTTP/1.1 101 ") and b"X-Stream-Protocol-Version: v4.channel.k8s.io" in head
        c = _Client(sock)  # type: ignore[arg-type]
        for sid, kind in ((1, "error"), (3, "stdin"), (5, "stdout"), (7, "stderr")):
            c.syn(sid, {"streamtype": [kind]})
        c.data(3, b"hello ")
        c.data(3, b"world\n", fin=True)
        got: dict[int, bytes] = {1: b"", 5: b"", 7: b""}
        ended: set[int] = set()
        replies = 0
        while ended != {1, 5, 7}:
            f = c.session.read_frame()
            if f.control:
                replies += f.kind == spdy.SYN_REPLY
                if f.kind == spdy.GOAWAY:
                    break
                continue
            got[f.stream] += f.payload
            if f.fin:
                ended.add(f.stream)
    assert replies == 4
    assert got[5] == b"hello world\n" and got[7] == b"the container\n"
    status = json.loads(got[1])
    assert status["reason"] == "NonZeroExitCode" and status["details"]["causes"] == [{"reason": "ExitCode", "message": "4"}]


def test_a_container_not_running_is_named_and_a_caller_without_the_client_certificate_is_refused(
        served: tuple[int, pki.Pki, dict[str, object]]) -> None:
    port, keys, _ = served
    with _connect(port, keys) as sock:
        head = _upgrade(sock, "/exec/ns/pod/stopped?command=true&output=1")
        body = b""
        while chunk := sock.recv(4096):
            body += chunk
    assert head.startswith(b"HTTP/1.1 404 Not Found") and body == b"container is not running"
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with _connect(port, keys, client_cert=False) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            if not sock.recv(1):
                raise ConnectionError("closed at once")


def test_every_other_request_is_relayed_to_kwok(served: tuple[int, pki.Pki, dict[str, object]]) -> None:
    port, keys, _ = served
    for path in ("/containerLogs/ns/pod/main?follow=true", "/exec/ns/kwoks-pod/unknown?command=true&output=1"):
        with _connect(port, keys) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"kwok saw " + path.encode()), answer
