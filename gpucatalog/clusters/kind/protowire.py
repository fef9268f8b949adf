"""The protobuf wire format, as far as the kubelet's plugin APIs use it: strings, bools, enums,
nested and repeated messages, and maps (repeated key/value entries).

The DRA stand-in (:mod:`.draplugin`) speaks three small gRPC APIs (plugin registration, DRA v1,
gRPC health). Their messages are encoded here from their field numbers, so neither protoc nor
generated code is needed: grpcio is handed these functions as its (de)serializers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Value = str | bytes | bool | int
Fields = dict[int, list[bytes | int]]

_VARINT, _LEN = 0, 2


class DecodeError(ValueError):
    """Bytes that are not a message of this wire format (truncated, or a wire type not used here)."""


def _varint(n: int) -> bytes:
    if n < 0:
        n &= (1 << 64) - 1  # proto3 encodes negative int32/int64 as ten-byte two's complement
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def encode(fields: Iterable[tuple[int, Value]]) -> bytes:
    """A message from ``(field number, value)`` pairs, in order; a repeated field is given once per
    element. Defaults (empty string, False, 0) are left out, as proto3 does; a message (bytes) is
    always written, since an empty one in a repeated field or map still counts."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, bool | int):
            if value:
                out += _varint(number << 3 | _VARINT) + _varint(int(value))
            continue
        if value == "":
            continue
        data = value.encode() if isinstance(value, str) else value
        out += _varint(number << 3 | _LEN) + _varint(len(data)) + data
    return bytes(out)


def encode_map(number: int, entries: Mapping[str, bytes]) -> list[tuple[int, Value]]:
    """A ``map<string, Message>`` field: one entry message (key 1, value 2) per item."""
    return [(number, encode([(1, key), (2, value)])) for key, value in sorted(entries.items())]


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise DecodeError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def decode(data: bytes) -> Fields:
    """Field number -> its values in order (bytes for length-delimited fields, int for varints)."""
    fields: Fields = {}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _read_varint(data, pos)
            fields.setdefault(number, []).append(value)
        elif wire == _LEN:
            size, pos = _read_varint(data, pos)
            if pos + size > len(data):
                raise DecodeError(f"field {number} runs past the message's end")
            fields.setdefault(number, []).append(data[pos:pos + size])
            pos += size
        else:
            raise DecodeError(f"field {number} has wire type {wire}, which these APIs do not use")
    return fields


def strings(fields: Fields, number: int) -> list[str]:
    return [v.decode() for v in fields.get(number, []) if isinstance(v, bytes)]


def string(fields: Fields, number: int) -> str:
    """The last value of a singular string field ("" when absent), as a proto3 parser reads it."""
    found = strings(fields, number)
    return found[-1] if found else ""


def messages(fields: Fields, number: int) -> list[Fields]:
    return [decode(v) for v in fields.get(number, []) if isinstance(v, bytes)]


def integer(fields: Fields, number: int) -> int:
    found = [v for v in fields.get(number, []) if isinstance(v, int)]
    return found[-1] if found else 0


def decode_map(fields: Fields, number: int) -> dict[str, bytes]:
    """A ``map<string, Message>`` field as key -> the value message's bytes."""
    out: dict[str, bytes] = {}
    for entry in messages(fields, number):
        values = [v for v in entry.get(2, []) if isinstance(v, bytes)]
        out[string(entry, 1)] = values[-1] if values else b""
    return out
