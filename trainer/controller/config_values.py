"""The value syntaxes of the controller's Configuration file, as Go writes them: durations
(``"15s"``, ``"1m30s"``), ``--feature-gates`` lists and the gates known, and TLS version and
cipher suite names (Go's, mapped to Python's ``ssl`` and OpenSSL's).

Pure functions and tables, apart from the pydantic model (:mod:`trainer.controller.config_model`)
so that they read, and are tested, as the small parsers they are.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

# --- Go durations ---------------------------------------------------------------------------
_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # Greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d*\.?\d*)([a-zA-Z\u00b5\u03bc]+)")


def parse_go_duration(text: str) -> float:
    """Seconds in a Go ``time.ParseDuration`` string: ``"15s"``, ``"1m30s"``, ``"1.5h"``,
    ``"300ms"``, ``"-2s"``, ``"0"``. Raises ValueError saying what is accepted."""
    original = text
    hint = (
        f"invalid duration {original!r}: use a number with a unit, e.g. 15s, 1m30s, 500ms "
        "(units ns, us, ms, s, m, h)"
    )
    text = text.strip()
    sign = 1.0
    if text and text[0] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(hint)
    total = 0.0
    pos = 0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None or match.group(1) in ("", "."):
            raise ValueError(hint)
        number, unit = match.groups()
        if unit not in _UNITS:
            raise ValueError(
                f"invalid duration {original!r}: unknown unit {unit!r} (units ns, us, ms, s, m, h)"
            )
        total += float(number) * _UNITS[unit]
        pos = match.end()
    return sign * total


def _trim(number: str) -> str:
    return number.rstrip("0").rstrip(".") if "." in number else number


def format_go_duration(seconds: float) -> str:
    """``seconds`` the way Go's ``Duration.String`` prints it: ``15s``, ``1m30s``, ``2h0m0s``,
    ``1.5s``, ``500ms``, ``0s``."""
    nanos = round(seconds * 1e9)
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos < 1_000:
        return f"{sign}{nanos}ns"
    if nanos < 1_000_000:
        return f"{sign}{_trim(f'{nanos / 1e3:.3f}')}\u00b5s"
    if nanos < 1_000_000_000:
        return f"{sign}{_trim(f'{nanos / 1e6:.6f}')}ms"
    hours, rest = divmod(nanos, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    secs = _trim(f"{rest / 1e9:.9f}")
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


# --- feature gates ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FeatureSpec:
    default: bool
    stage: str  # Alpha, Beta, GA


FEATURE_GATES: dict[str, FeatureSpec] = {
    "TrainJobStatus": FeatureSpec(default=False, stage="Alpha"),
}
"""Every feature gate of v2.3: only ``TrainJobStatus`` (docs/configuration.md)."""

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_feature_gates(text: str) -> dict[str, bool]:
    """The ``--feature-gates`` flag: ``"A=true,B=false"`` -> ``{"A": True, "B": False}``.

    Values are Go ``strconv.ParseBool`` spellings; messages are component-base's. Raises
    ValueError for a missing value, a bad bool, or a gate that does not exist.
    """
    gates: dict[str, bool] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"missing bool value for {name}")
        value = raw.strip()
        if value in _TRUE:
            gates[name] = True
        elif value in _FALSE:
            gates[name] = False
        else:
            raise ValueError(
                f'invalid value of {name}={value}, err: strconv.ParseBool: parsing "{value}": '
                "invalid syntax"
            )
    for name in gates:
        if name not in FEATURE_GATES:
            raise ValueError(f"unrecognized feature gate: {name} (known: {known_gates()})")
    return gates


def known_gates() -> str:
    """The known gates, for error messages."""
    return ", ".join(sorted(FEATURE_GATES))


# --- TLS --------------------------------------------------------------------------------------
TLS_VERSIONS: dict[str, ssl.TLSVersion] = {}
for _minor, _version in (
    ("0", ssl.TLSVersion.TLSv1),
    ("1", ssl.TLSVersion.TLSv1_1),
    ("2", ssl.TLSVersion.TLSv1_2),
    ("3", ssl.TLSVersion.TLSv1_3),
):
    for _spelling in (f"1.{_minor}", f"TLS1.{_minor}", f"VersionTLS1{_minor}"):
        TLS_VERSIONS[_spelling] = _version

# Go's cipher suite names (tls.CipherSuites() and tls.InsecureCipherSuites()) -> OpenSSL's.
# TLS 1.3 suites (OpenSSL name None) are accepted, as Go accepts them, and not configurable.
CIPHER_SUITES: dict[str, str | None] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}
