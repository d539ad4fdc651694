"""Values printed as Go prints them in Kubernetes' messages: ``%q`` (``strconv.Quote``),
``%v`` of a float64, and ``encoding/json``'s ``Marshal`` (field errors print a map's or a
list's value as its JSON). Written from Go's documented behaviour, checked against
kube-apiserver's answers (tests/cluster/test_crd_validation.py)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def go_quote(text: str) -> str:
    """``strconv.Quote``: printable characters as they are (Unicode included), the C escapes,
    ``\\xNN`` below U+0080, ``\\uNNNN`` or ``\\UNNNNNNNN`` above."""
    out = ['"']
    for char in text:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def _shortest(value: float) -> tuple[str, int]:
    """The shortest digits that read back as ``value`` and its decimal exponent (d.ddd e exp)."""
    _, digits, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(str(d) for d in digits)
    return text, exponent + len(text) - 1


def _exponent_form(digits: str, exp: int, exp_width: int) -> str:
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    sign = "-" if exp < 0 else "+"
    return f"{mantissa}e{sign}{abs(exp):0{exp_width}d}"


def _plain_form(digits: str, exp: int) -> str:
    if exp < 0:
        return "0." + "0" * (-exp - 1) + digits
    if exp + 1 >= len(digits):
        return digits + "0" * (exp + 1 - len(digits))
    return digits[: exp + 1] + "." + digits[exp + 1 :]


def go_float(value: float) -> str:
    """``fmt``'s ``%v`` of a float64: the shortest digits, in exponent form (a two-digit
    exponent at least) when the exponent is below -4 or at least 6 (``1e+06``, ``123456``)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    digits, exp = _shortest(value)
    sign = "-" if value < 0 else ""
    if exp < -4 or exp >= 6:
        return sign + _exponent_form(digits, exp, 2)
    return sign + _plain_form(digits, exp)


def _json_float(value: float) -> str:
    """``encoding/json``'s float64: plain between 1e-6 and 1e21, else exponent form."""
    if value == 0:
        return "0"
    digits, exp = _shortest(value)
    sign = "-" if value < 0 else ""
    if exp < -6 or exp >= 21:
        return sign + _exponent_form(digits, exp, 1)
    return sign + _plain_form(digits, exp)


_JSON_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def _json_string(text: str) -> str:
    out = ['"']
    for char in text:
        if char in _JSON_ESCAPES:
            out.append(_JSON_ESCAPES[char])
        elif ord(char) < 0x20:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def go_json(value: Any) -> str:
    """``json.Marshal`` of a decoded JSON value: compact, map keys sorted, HTML characters
    escaped, Unicode as it is, whole floats without a fraction."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _json_float(value)
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted((str(k), v) for k, v in value.items())
        return "{" + ",".join(f"{_json_string(k)}:{go_json(v)}" for k, v in items) + "}"
    return _json_string(str(value))


def go_struct(fields: dict[str, Any]) -> str:
    """``json.Marshal`` of a Go struct given as its fields in declaration order (a model's
    ``to_wire``, whose field order is the Go type's): as :func:`go_json`, but the fields keep
    their order (a struct's JSON is not sorted as a map's is). How apimachinery prints a
    struct value in a field error, e.g. upstream's ``spec.runtimeRef: Invalid value:
    {"name":"x","apiGroup":"trainer.kubeflow.org","kind":"ClusterTrainingRuntime"}``."""
    return "{" + ",".join(f"{_json_string(k)}:{go_json(v)}" for k, v in fields.items()) + "}"
