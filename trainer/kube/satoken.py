"""Is a bearer token shaped like a Kubernetes service-account token for one audience?

A cheap, local look at a token before anyone asks the API server about it
(docs/status-server.md, "Authentication"): a JWS compact serialisation (three base64url
parts), a JSON header naming an asymmetric signing algorithm, and claims as kube-apiserver
writes them for a TokenRequest: ``iss``, ``sub`` ``system:serviceaccount:<ns>:<name>``,
``aud`` containing the audience, ``exp`` not past, and ``kubernetes.io`` {namespace,
serviceaccount {name, uid}, optionally pod/secret/node {name, uid}} agreeing with ``sub``.

Nothing here checks the signature: that is the TokenReview's job (the API server holds the
key). A token that passes is only *possibly* valid; a token that fails is certainly not a
token the API server would authenticate for this audience, so it can be refused without a
review. Legacy Secret-based tokens have no ``aud``/``exp`` and are refused: they are never
issued for an audience other than the API's. Standard library and :mod:`trainer.api` only.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any, Final

from trainer.machinery.names import (
    DNS1123_LABEL_FMT,
    DNS1123_LABEL_MAX,
    DNS1123_SUBDOMAIN_FMT,
    DNS1123_SUBDOMAIN_MAX,
)

MAX_TOKEN_LENGTH: Final = 16 * 1024
"""kube-apiserver's tokens are about 1 KiB; anything this long is not one."""
SIGNING_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"}
)
"""What a service-account signing key can be (RSA or ECDSA; never ``none`` or HMAC)."""
ECDSA_SIGNATURE_BYTES: Final = {"ES256": 64, "ES384": 96, "ES512": 132}
CLOCK_LEEWAY_SECONDS: Final = 60
"""kube-apiserver's own leeway on ``exp``/``nbf`` (go-jose's default): a token that just
expired may still pass its review, so it is not refused here."""
SA_PREFIX: Final = "system:serviceaccount:"

_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")
_NAMESPACE = re.compile(DNS1123_LABEL_FMT)
_NAME = re.compile(DNS1123_SUBDOMAIN_FMT)


class MalformedToken(ValueError):
    """Not a service-account token for the audience; the message says why (for logs: it
    never contains the token)."""


@dataclass(frozen=True)
class TokenClaims:
    """What an (unverified) service-account token says about itself."""

    namespace: str
    service_account: str
    expires: float
    pod: str | None = None


def _part(text: str, what: str) -> bytes:
    if not _BASE64URL.fullmatch(text):
        raise MalformedToken(f"the {what} is not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise MalformedToken(f"the {what} is not base64url") from None


def _object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:  # UnicodeDecodeError included
        raise MalformedToken(f"the {what} is not JSON") from None
    if not isinstance(value, dict):
        raise MalformedToken(f"the {what} is not a JSON object")
    return value


def _number(claims: dict[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedToken(f"the {name} claim is not a number")
    return float(value)


def _optional_number(claims: dict[str, Any], name: str) -> float | None:
    return None if claims.get(name) is None else _number(claims, name)


def _names(value: Any, what: str) -> tuple[str, str]:
    """(name, uid) of a ``kubernetes.io`` reference (uid may be empty)."""
    if not isinstance(value, dict):
        raise MalformedToken(f"kubernetes.io.{what} is not an object")
    name, uid = value.get("name"), value.get("uid", "")
    if not isinstance(name, str) or not name or not isinstance(uid, str):
        raise MalformedToken(f"kubernetes.io.{what} has no name")
    return name, uid


def _subject(sub: Any) -> tuple[str, str]:
    if not isinstance(sub, str) or not sub.startswith(SA_PREFIX):
        raise MalformedToken("the subject is not a service account")
    namespace, _, name = sub[len(SA_PREFIX) :].partition(":")
    if not (
        0 < len(namespace) <= DNS1123_LABEL_MAX
        and _NAMESPACE.fullmatch(namespace)
        and 0 < len(name) <= DNS1123_SUBDOMAIN_MAX
        and _NAME.fullmatch(name)
    ):
        raise MalformedToken("the subject is not a service account")
    return namespace, name


def precheck(token: str, audience: str, now: float) -> TokenClaims:
    """The claims of ``token`` if it is shaped like a service-account token for
    ``audience`` that has not expired at ``now`` (Unix seconds); :class:`MalformedToken`
    otherwise. The signature is not checked."""
    if len(token) > MAX_TOKEN_LENGTH:
        raise MalformedToken("the token is too long")
    parts = token.split(".")
    if len(parts) != 3:
        raise MalformedToken("not a JWT (three dot-separated parts)")
    header = _object(_part(parts[0], "header"), "header")
    claims = _object(_part(parts[1], "payload"), "payload")
    signature = _part(parts[2], "signature")
    alg = header.get("alg")
    if alg not in SIGNING_ALGORITHMS:
        raise MalformedToken("the header names no service-account signing algorithm")
    if len(signature) != ECDSA_SIGNATURE_BYTES.get(str(alg), len(signature)):
        raise MalformedToken(f"the signature is not an {alg} signature")

    iss = claims.get("iss")
    if not isinstance(iss, str) or not iss:
        raise MalformedToken("the token names no issuer")
    namespace, name = _subject(claims.get("sub"))
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud
    if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
        raise MalformedToken("the aud claim is not a list of strings")
    if audience not in audiences:
        raise MalformedToken("the token is not for this audience")
    exp = _number(claims, "exp")
    if exp + CLOCK_LEEWAY_SECONDS <= now:
        raise MalformedToken("the token has expired")
    nbf = _optional_number(claims, "nbf")
    if nbf is not None and nbf - CLOCK_LEEWAY_SECONDS > now:
        raise MalformedToken("the token is not valid yet")
    _optional_number(claims, "iat")

    k8s = claims.get("kubernetes.io")
    if not isinstance(k8s, dict):
        raise MalformedToken("the token has no kubernetes.io claims")
    sa_name, _ = _names(k8s.get("serviceaccount"), "serviceaccount")
    if k8s.get("namespace") != namespace or sa_name != name:
        raise MalformedToken("the kubernetes.io claims do not match the subject")
    pod = None
    for bound in ("pod", "secret", "node"):
        if k8s.get(bound) is not None:
            bound_name, _ = _names(k8s[bound], bound)
            if bound == "pod":
                pod = bound_name
    return TokenClaims(namespace, name, exp, pod)
