"""Kubernetes resource quantities: parse, add, multiply, round and print them the way
``k8s.io/apimachinery/pkg/api/resource.Quantity`` does (exact rational arithmetic)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

Format = Literal["DecimalSI", "BinarySI", "DecimalExponent"]

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -3, "u": -2, "m": -1, "": 0, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_DECIMAL_BY_EXP = {v: k for k, v in _DECIMAL.items()}
_BINARY_BY_EXP = {v: k for k, v in _BINARY.items()}

_RE = re.compile(
    r"^(?P<sign>[+-])?(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<bin>[KMGTPE]i)|(?P<exp>[eE][+-]?[0-9]+)|(?P<dec>[numkMGTPE])?)$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@dataclass(frozen=True)
class Quantity:
    """An exact quantity and the format it prints in (the format of the first operand)."""

    value: Fraction
    format: Format = "DecimalSI"

    @classmethod
    def parse(cls, raw: str | int | float) -> Quantity:
        if isinstance(raw, bool):
            raise QuantityError(f"quantity must be a string or number, not {raw!r}")
        if isinstance(raw, int):
            return cls(Fraction(raw))
        if isinstance(raw, float):
            return cls(Fraction(str(raw)))
        if len(raw) <= _CACHED_LENGTH:
            return _parse_cached(raw)
        return _parse_string(raw)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.format)

    def __mul__(self, n: int) -> Quantity:
        return Quantity(self.value * n, self.format)

    def ceil(self) -> int:
        """``Quantity.Value()``: rounded up to a whole number (0.7 -> 1, 2500m -> 3)."""
        return -(-self.value.numerator // self.value.denominator)

    def is_zero(self) -> bool:
        return self.value == 0

    def __str__(self) -> str:
        """Canonical form, as Kubernetes prints it (``102``, ``408Gi``, ``1500m``)."""
        v = self.value
        if v == 0:
            return "0"
        sign = "-" if v < 0 else ""
        v = abs(v)
        if self.format == "BinarySI" and v.denominator == 1 and v >= 1024:
            exp = 0
            n = v.numerator
            while exp < 6 and n % 1024 == 0:
                n //= 1024
                exp += 1
            if exp:
                return f"{sign}{n}{_BINARY_BY_EXP[exp]}"
        if self.format == "BinarySI" and v.denominator == 1:
            return f"{sign}{v.numerator}"
        # DecimalSI (and the fallback for fractional binary values): the largest SI suffix
        # that keeps the number whole; below nano, round up to a nano like Kubernetes does.
        for exp in range(6, -4, -1):
            scaled = v / Fraction(1000) ** exp
            if scaled.denominator == 1:
                if self.format == "DecimalExponent" and exp:
                    return f"{sign}{scaled.numerator}e{3 * exp}"
                return f"{sign}{scaled.numerator}{_DECIMAL_BY_EXP[exp]}"
        nanos = -(-v * 10**9 // 1)
        return f"{sign}{int(nanos)}n"


#: Strings up to this long are parsed once and cached (a Quantity is immutable, and the same
#: few strings, ``"4"``, ``"16Gi"``, come back on every render); the bound keeps the cache small
#: whatever a client sends.
_CACHED_LENGTH = 40


def _parse_string(raw: str) -> Quantity:
    m = _RE.match(raw.strip())
    if not m:
        raise QuantityError(f"{raw!r} is not a quantity (examples: 500m, 2, 1.5, 4Gi, 1e3)")
    num = Fraction(m["num"])
    if m["sign"] == "-":
        num = -num
    if m["bin"]:
        return Quantity(num * 1024 ** _BINARY[m["bin"]], "BinarySI")
    if m["exp"]:
        return Quantity(num * Fraction(10) ** int(m["exp"][1:]), "DecimalExponent")
    return Quantity(num * Fraction(1000) ** _DECIMAL[m["dec"] or ""], "DecimalSI")


_parse_cached = functools.lru_cache(maxsize=2048)(_parse_string)


def parse(raw: str | int | float) -> Quantity:
    return Quantity.parse(raw)


def total(values: list[Quantity]) -> Quantity:
    """The sum, in the format of the first value."""
    if not values:
        return Quantity(Fraction(0))
    out = values[0]
    for v in values[1:]:
        out = out + v
    return out
