"""Protocol Buffers wire encoding, the few pieces the project writes by hand
(https://protobuf.dev/programming-guides/encoding/): the local API server's OpenAPI v2
protobuf document and the data cache's Arrow Flight messages. Both build small messages of
known shape, so generated classes would be more code than this. Standard library only."""

from __future__ import annotations

VARINT = 0
FIXED64 = 1
LENGTH_DELIMITED = 2


def varint(value: int) -> bytes:
    """``value`` as a base-128 varint; a negative int64 takes ten bytes, as in Go."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, wire_type: int, payload: bytes) -> bytes:
    """Field ``number``'s key followed by ``payload`` (already encoded for ``wire_type``)."""
    return varint(number << 3 | wire_type) + payload


def length_delimited(number: int, data: bytes) -> bytes:
    """A bytes, string or embedded-message field."""
    return field(number, LENGTH_DELIMITED, varint(len(data)) + data)
