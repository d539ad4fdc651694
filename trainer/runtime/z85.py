"""Z85, the ZeroMQ base-85 text encoding of binary keys (ZeroMQ RFC 32).

ZeroMQ CURVE certificates carry their 32-byte keys as 40-character Z85 strings; the Flux
plugin writes such a certificate. Z85 maps every 4 bytes (a big-endian 32-bit number) to 5
characters of an 85-character alphabet chosen to be safe inside quoted strings and source
code. Input lengths are restricted as the RFC says: a multiple of 4 bytes to encode, a
multiple of 5 characters to decode (no padding scheme).
"""

from __future__ import annotations

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
"""The 85 characters of RFC 32, in digit order."""

_DIGIT = {ch: i for i, ch in enumerate(ALPHABET)}
_POWERS = (85**4, 85**3, 85**2, 85, 1)


def encode(data: bytes) -> str:
    """The Z85 text of ``data``; its length must be a multiple of 4 (RFC 32)."""
    if len(data) % 4:
        raise ValueError(f"Z85 encodes a multiple of 4 bytes, got {len(data)} bytes")
    out: list[str] = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        out.extend(ALPHABET[(value // power) % 85] for power in _POWERS)
    return "".join(out)


def decode(text: str) -> bytes:
    """The bytes of the Z85 ``text``; its length must be a multiple of 5 and every character
    must be in the Z85 alphabet, and each 5-character group must fit in 32 bits."""
    if len(text) % 5:
        raise ValueError(f"Z85 decodes a multiple of 5 characters, got {len(text)} characters")
    out = bytearray()
    for i in range(0, len(text), 5):
        value = 0
        for ch in text[i : i + 5]:
            digit = _DIGIT.get(ch)
            if digit is None:
                raise ValueError(f"{ch!r} at offset {text.index(ch, i)} is not a Z85 character")
            value = value * 85 + digit
        if value > 0xFFFFFFFF:
            raise ValueError(f"Z85 group {text[i : i + 5]!r} exceeds 32 bits")
        out += value.to_bytes(4, "big")
    return bytes(out)
