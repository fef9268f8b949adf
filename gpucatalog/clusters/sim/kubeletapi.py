"""The kubelet API of every simulated node: ``kubectl exec`` into sim-kubelet pods, the rest kwok's.

Each node advertises this server's port as its kubelet endpoint; the API server dials it at
127.0.0.1 with its kubelet client certificate (anything else is refused at the TLS handshake).

* ``/exec/<namespace>/<pod>/<container>`` (and the form with the pod's UID) for a container the
  sim kubelet runs as a process: the command runs inside that container (``nsenter`` into its
  mount and network namespaces and its root, with its environment), its stdin, stdout and stderr
  streamed over SPDY (:mod:`.spdy`, protocols v4 down to v1 of ``channel.k8s.io``), and the exit
  code reported on the error stream as a kubelet does (``NonZeroExitCode``). A TTY is not
  emulated: a TTY session gets plain pipes, stderr folded into stdout.
* Every other request (container logs, ``/healthz``, exec into a pod kwok only simulates) goes
  to kwok's own server unchanged, bytes both ways.

Served by a thread of the sim kubelet process (it knows the container processes).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import parse_qs, unquote, urlsplit

from gpucatalog.clusters.sim import procs, spdy
from gpucatalog.core import errors, executor

PROTOCOLS = ("v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io")
MAX_HEAD = 64 * 1024
STREAM_TIMEOUT_S = 30.0  # a kubelet waits as long for the caller to open its streams


@dataclass(frozen=True)
class Target:
    """A running container process to exec into."""

    pid: int


# (namespace, pod, container) -> the process; why it cannot be exec'd into; None: not a sim-kubelet pod
Lookup = Callable[[str, str, str], "Target | str | None"]


@dataclass(frozen=True)
class ExecRequest:
    namespace: str
    pod: str
    container: str
    command: list[str]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @classmethod
    def parse(cls, target: str) -> ExecRequest | None:
        """The exec request a path names, or None for any other path."""
        url = urlsplit(target)
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        if not parts or parts[0] != "exec" or len(parts) not in (4, 5):
            return None
        q = parse_qs(url.query)
        def flag(name: str) -> bool:
            return q.get(name, [""])[0] in ("1", "true")

        tty = flag("tty")
        return cls(parts[1], parts[2], parts[-1], q.get("command", []), flag("input"), flag("output"),
                   flag("error") and not tty, tty)

    @property
    def streams(self) -> int:
        """How many streams the caller opens: error, then one per channel asked for (and resize for a TTY)."""
        return 1 + self.stdin + self.stdout + self.stderr + self.tty


def _status(code: int | None, why: str = "") -> bytes:
    """What the v4 protocol writes on the error stream when the command ends."""
    if code == 0:
        return json.dumps({"metadata": {}, "status": "Success"}).encode()
    if code is None:
        return json.dumps({"metadata": {}, "status": "Failure", "message": why, "reason": "InternalError",
                           "code": 500}).encode()
    return json.dumps({"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                       "message": f"command terminated with non-zero exit code: exit status {code}",
                       "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}).encode()


class Server:
    def __init__(self, port: int, cert: Path, key: Path, ca: Path, kwok_port: int, lookup: Lookup) -> None:
        self.kwok_port, self.lookup = kwok_port, lookup
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(cert, key)
        self.tls.load_verify_locations(ca)
        self.tls.verify_mode = ssl.CERT_REQUIRED  # the API server's kubelet client certificate
        self.upstream = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.upstream.load_verify_locations(ca)
        self.upstream.check_hostname = False  # kwok's certificate names the node, dialled at 127.0.0.1
        self.sock = socket.create_server(("127.0.0.1", port))
        self.nsenter = shutil.which("nsenter") or "nsenter"

    def serve_forever(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._handle, args=(conn,), daemon=True, name="kubelet-api").start()

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, daemon=True, name="kubelet-api-accept")
        t.start()
        return t

    def close(self) -> None:
        self.sock.close()

    # -- one connection ------------------------------------------------------------------------
    def _handle(self, raw: socket.socket) -> None:
        try:
            with self.tls.wrap_socket(raw, server_side=True) as conn:
                head, rest = _read_head(conn)
                if head is None:
                    return
                words = head.split(b" ", 2)
                req = ExecRequest.parse(words[1].decode("latin-1")) if len(words) == 3 else None
                target = self.lookup(req.namespace, req.pod, req.container) if req else None
                if req is None or target is None:
                    self._relay(conn, head + rest)  # not a sim-kubelet pod's exec: kwok answers
                elif isinstance(target, str):
                    _respond(conn, 404, target)
                else:
                    self._exec(conn, head, rest, req, target)
        except (OSError, ssl.SSLError, EOFError, spdy.ProtocolError):
            pass  # the caller went away or spoke nonsense; nothing to clean up but the socket
        finally:
            with contextlib.suppress(OSError):
                raw.close()

    def _relay(self, conn: ssl.SSLSocket, first: bytes) -> None:
        with socket.create_connection(("127.0.0.1", self.kwok_port)) as up_raw, \
                self.upstream.wrap_socket(up_raw) as up:
            up.sendall(first)

            def pump(src: ssl.SSLSocket, dst: ssl.SSLSocket) -> None:
                with contextlib.suppress(OSError):
                    while data := src.recv(65536):
                        dst.sendall(data)
                # one side closed: the exchange is over, both directions end (the plain socket's
                # shutdown: SSLSocket's own drops its TLS state under the other thread's recv)
                for s in (src, dst):
                    with contextlib.suppress(OSError):
                        socket.socket.shutdown(s, socket.SHUT_RDWR)

            back = threading.Thread(target=pump, args=(up, conn), daemon=True)
            back.start()
            pump(conn, up)
            back.join()

    def _exec(self, conn: ssl.SSLSocket, head: bytes, rest: bytes, req: ExecRequest, target: Target) -> None:
        headers = _headers(head)
        if "spdy/3.1" not in headers.get("upgrade", "").lower():
            _respond(conn, 400, "the sim kubelet streams exec over SPDY/3.1 only (the API server translates WebSockets)")
            return
        offered = [p.strip() for v in headers.get("x-stream-protocol-version", "").split(",") for p in [v] if p.strip()]
        protocol = next((p for p in offered if p in PROTOCOLS), "channel.k8s.io" if not offered else "")
        if not protocol:
            _respond(conn, 403, f"unable to negotiate protocol: client supports {offered}, server accepts {list(PROTOCOLS)}")
            return
        if not req.command:
            _respond(conn, 400, "no command given")
            return
        conn.sendall(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                     + f"X-Stream-Protocol-Version: {protocol}\r\n\r\n".encode())
        pending = [rest]

        def recv(n: int) -> bytes:
            if pending:
                data = pending.pop()
                if data:
                    return data
            return conn.recv(n)

        Session(spdy.Session(recv, conn.sendall), conn, req, target, protocol, self.nsenter).run()


class Session:
    """One exec: open the streams, run the command, stream its output, report how it ended."""

    def __init__(self, s: spdy.Session, conn: ssl.SSLSocket, req: ExecRequest, target: Target, protocol: str,
                 nsenter: str) -> None:
        self.s, self.conn, self.req, self.target, self.protocol, self.nsenter = s, conn, req, target, protocol, nsenter
        self.streams: dict[str, int] = {}
        self.proc: executor.Process | None = None

    def run(self) -> None:
        self.conn.settimeout(STREAM_TIMEOUT_S)
        while len(self.streams) < self.req.streams:
            self._frame(self.s.read_frame())
        self.conn.settimeout(None)
        try:
            env = procs.container_environ(self.target.pid)
        except OSError:
            env = {}  # the process is gone: nsenter says so
        try:
            self.proc = executor.piped(procs.enter_argv(self.target.pid, self.req.command, self.nsenter), env=env,
                                       stdin=self.req.stdin, merge_stderr=self.req.tty or not self.req.stderr)
        except errors.ToolError as exc:
            self._finish(None, f"cannot start nsenter: {exc}")
            return
        pumps = [threading.Thread(target=self._pump, args=(self.proc.stdout, "stdout"), daemon=True)]
        if self.proc.stderr is not None:
            pumps.append(threading.Thread(target=self._pump, args=(self.proc.stderr, "stderr"), daemon=True))
        for t in pumps:
            t.start()
        reader = threading.Thread(target=self._read_rest, daemon=True)
        reader.start()
        code = self.proc.wait()
        for t in pumps:
            t.join()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._finish(code)

    def _frame(self, f: spdy.Frame) -> None:
        if f.control and f.kind == spdy.SYN_STREAM:
            kind = (f.headers.get("streamtype") or [""])[0]
            self.streams[kind] = f.stream
            self.s.reply(f.stream)
        elif f.control and f.kind == spdy.PING:
            self.s.ping(f.payload)
        elif f.control and f.kind == spdy.GOAWAY:
            raise EOFError("peer went away")
        elif not f.control and f.stream == self.streams.get("stdin") and self.proc and self.proc.stdin:
            try:
                if f.payload:
                    self.proc.stdin.write(f.payload)
                    self.proc.stdin.flush()
                if f.fin:
                    self.proc.stdin.close()
            except (BrokenPipeError, ValueError):
                pass  # the command stopped reading

    def _read_rest(self) -> None:
        """Frames after the streams are open: stdin data, pings; a vanished caller ends the command."""
        try:
            while True:
                self._frame(self.s.read_frame())
        except (OSError, EOFError, spdy.ProtocolError, ValueError):
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()

    def _pump(self, src: IO[bytes] | None, channel: str) -> None:
        stream = self.streams.get(channel) or self.streams.get("stdout")
        if src is None:
            return
        with contextlib.suppress(OSError, ValueError):
            while data := src.read1(65536):  # type: ignore[attr-defined]
                if stream is not None:
                    self.s.data(stream, data)

    def _finish(self, code: int | None, why: str = "") -> None:
        with contextlib.suppress(OSError):
            for channel in ("stdout", "stderr"):
                if channel in self.streams:
                    self.s.data(self.streams[channel], b"", fin=True)
            if "error" in self.streams:
                if self.protocol == PROTOCOLS[0]:
                    self.s.data(self.streams["error"], _status(code, why), fin=True)
                else:  # v1-v3: the error stream carries only a message, and only on failure
                    msg = why or (f"command terminated with non-zero exit code: exit status {code}" if code else "")
                    self.s.data(self.streams["error"], msg.encode(), fin=True)
            self.s.goaway()


def _read_head(conn: ssl.SSLSocket) -> tuple[bytes | None, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data or len(buf) > MAX_HEAD:
            return None, b""
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def _headers(head: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep:
            key = name.strip().lower()
            out[key] = f"{out[key]},{value.strip()}" if key in out else value.strip()
    return out


def _respond(conn: ssl.SSLSocket, code: int, message: str) -> None:
    reason = {400: "Bad Request", 403: "Forbidden", 404: "Not Found"}.get(code, "Error")
    body = message.encode()
    conn.sendall(f"HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
