"""The server side of SPDY/3.1 framing, as far as a kubelet's streaming API needs it.

The API server talks to a kubelet's ``/exec`` endpoint over SPDY/3.1 (it translates a client's
WebSocket into SPDY on the way), so the sim kubelet's API (:mod:`.kubeletapi`) speaks it too. The
peer opens one stream per channel (error, stdin, stdout, stderr, resize) with SYN_STREAM; this
side answers each with SYN_REPLY, reads DATA on stdin, writes DATA on stdout/stderr/error and
ends a stream with FIN. Kubernetes' SPDY library sends no WINDOW_UPDATE and enforces no window,
so none is kept here; PING is answered, GOAWAY ends the session.

Frame layout and the header-block dictionary are the SPDY/3 draft's (header blocks are one zlib
stream per direction for the whole connection, flushed after each block).
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01


def _dictionary() -> bytes:
    """The SPDY/3 header compression dictionary: length-prefixed words, then raw text."""
    words = (
        "options head post put delete trace accept accept-charset accept-encoding accept-language "
        "accept-ranges age allow authorization cache-control connection content-base content-encoding "
        "content-language content-length content-location content-md5 content-range content-type date "
        "etag expect expires from host if-match if-modified-since if-none-match if-range "
        "if-unmodified-since last-modified location max-forwards pragma proxy-authenticate "
        "proxy-authorization range referer retry-after server te trailer transfer-encoding upgrade "
        "user-agent vary via warning www-authenticate method get status 200|OK version HTTP/1.1 url "
        "public set-cookie keep-alive origin"
    ).split(" ")
    out = b"".join(struct.pack(">I", len(w)) + w.encode() for w in (w.replace("|", " ") for w in words))
    tail = (
        "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
        "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
        "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
        "503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
        "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,"
        "application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age="
        "gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
    )
    return out + tail.encode()


DICTIONARY = _dictionary()


class ProtocolError(Exception):
    """The peer sent something that is not SPDY/3 framing."""


@dataclass
class Frame:
    control: bool
    kind: int  # control frame type; 0 for DATA
    flags: int
    stream: int
    payload: bytes
    headers: dict[str, list[str]] = field(default_factory=dict)

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


def encode_headers(headers: dict[str, list[str]]) -> bytes:
    """A header block before compression: a count, then each name and its values joined by NUL."""
    out = [struct.pack(">I", len(headers))]
    for name, values in headers.items():
        n, v = name.lower().encode(), "\0".join(values).encode()
        out += [struct.pack(">I", len(n)), n, struct.pack(">I", len(v)), v]
    return b"".join(out)


def decode_headers(block: bytes) -> dict[str, list[str]]:
    try:
        (count,) = struct.unpack_from(">I", block, 0)
        pos, out = 4, {}
        for _ in range(count):
            (n,) = struct.unpack_from(">I", block, pos)
            name = block[pos + 4:pos + 4 + n].decode()
            pos += 4 + n
            (n,) = struct.unpack_from(">I", block, pos)
            out[name.lower()] = block[pos + 4:pos + 4 + n].decode().split("\0")
            pos += 4 + n
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"bad header block: {exc}") from exc
    return out


class Session:
    """One SPDY connection over a socket-like object (``recv``/``sendall``): frames read one at a
    time by the caller's thread; writes from any thread, whole frames, never interleaved."""

    def __init__(self, recv: Callable[[int], bytes], send: Callable[[bytes], None]) -> None:
        self._recv, self._send = recv, send
        self._lock = threading.Lock()
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self._deflate = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY,
                                         zdict=DICTIONARY)
        self._buf = b""

    # -- reading -------------------------------------------------------------------------------
    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self._recv(65536)
            if not chunk:
                raise EOFError("connection closed")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def read_frame(self) -> Frame:
        first, second = struct.unpack(">II", self._read(8))
        flags, length = second >> 24, second & 0xFFFFFF
        payload = self._read(length)
        if not first & 0x80000000:
            return Frame(False, 0, flags, first & 0x7FFFFFFF, payload)
        version, kind = (first >> 16) & 0x7FFF, first & 0xFFFF
        if version != VERSION:
            raise ProtocolError(f"SPDY version {version}, not {VERSION}")
        frame = Frame(True, kind, flags, 0, payload)
        if kind in (SYN_STREAM, SYN_REPLY, HEADERS, RST_STREAM, WINDOW_UPDATE):
            (sid,) = struct.unpack_from(">I", payload, 0)
            frame.stream = sid & 0x7FFFFFFF
        if kind in (SYN_STREAM, SYN_REPLY, HEADERS):
            start = 10 if kind == SYN_STREAM else 4
            try:
                block = self._inflate.decompress(payload[start:])
            except zlib.error as exc:
                raise ProtocolError(f"bad compressed header block: {exc}") from exc
            frame.headers = decode_headers(block)
        return frame

    # -- writing -------------------------------------------------------------------------------
    def _control(self, kind: int, flags: int, payload: bytes) -> None:
        with self._lock:
            self._send(struct.pack(">II", 0x80000000 | VERSION << 16 | kind, flags << 24 | len(payload)) + payload)

    def reply(self, stream: int, headers: dict[str, list[str]] | None = None, fin: bool = False) -> None:
        with self._lock:  # the compressor's state is per connection: blocks go out in the order made
            block = self._deflate.compress(encode_headers(headers or {})) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
            payload = struct.pack(">I", stream) + block
            self._send(struct.pack(">II", 0x80000000 | VERSION << 16 | SYN_REPLY,
                                   (FLAG_FIN if fin else 0) << 24 | len(payload)) + payload)

    def data(self, stream: int, data: bytes, fin: bool = False) -> None:
        with self._lock:
            for i in range(0, max(len(data), 1), 0xFFFFFF):
                chunk = data[i:i + 0xFFFFFF]
                last = i + 0xFFFFFF >= len(data)
                self._send(struct.pack(">II", stream, ((FLAG_FIN if fin and last else 0) << 24) | len(chunk)) + chunk)

    def ping(self, payload: bytes) -> None:
        self._control(PING, 0, payload)

    def goaway(self, last_stream: int = 0) -> None:
        self._control(GOAWAY, 0, struct.pack(">II", last_stream, 0))
