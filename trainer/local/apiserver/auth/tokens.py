"""Service-account tokens of the local API server: TokenRequest
(``POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token``) and TokenReview
(``POST /apis/authentication.k8s.io/v1/tokenreviews``), as kube-apiserver answers them.

Tokens are JWTs signed ES256 with a P-256 key made when the server starts (it is not
persisted: tokens do not survive a restart of the server, as if its signing key rotated).
Claims: ``iss``, ``sub`` ``system:serviceaccount:<ns>:<sa>``, ``aud``, ``exp``, ``iat``,
``nbf``, ``jti`` and ``kubernetes.io`` {namespace, serviceaccount {name, uid}, pod {name,
uid}} when the token is bound to a pod. A review checks the signature, the time window, the
audiences (at least one in common with the request's, or with the server's own when the
request names none), that the service account still exists with the same UID and, for a
pod-bound token, that the pod does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from trainer.machinery.times import time_from_epoch

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCES = (ISSUER,)
DEFAULT_EXPIRATION = 3600
MIN_EXPIRATION = 600
MAX_EXPIRATION = 2**32
SA_PREFIX = "system:serviceaccount:"

Lookup = Callable[[str, str, str], dict[str, Any] | None]
"""(plural, namespace, name) -> the stored object (serviceaccounts, pods)."""


class TokenRequestError(ValueError):
    """A TokenRequest the server refuses (422 with this message)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class TokenIssuer:
    def __init__(self, issuer: str = ISSUER) -> None:
        self.issuer = issuer
        self._key = ec.generate_private_key(ec.SECP256R1())
        public = self._key.public_key().public_bytes(
            Encoding.DER, PublicFormat.SubjectPublicKeyInfo
        )
        self.kid = _b64(hashlib.sha256(public).digest())

    # --- JWT ----------------------------------------------------------------------------------
    def sign(self, claims: dict[str, Any]) -> str:
        header = {"alg": "ES256", "kid": self.kid, "typ": "JWT"}
        signing_input = (
            _b64(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + _b64(json.dumps(claims, separators=(",", ":")).encode())
        )
        der = self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return signing_input + "." + _b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    def verify(self, token: str) -> dict[str, Any]:
        """The claims of a token this issuer signed; ValueError otherwise."""
        parts = token.split(".")
        if len(parts) != 3:
            raise ValueError("not a JWT")
        try:
            header = json.loads(_unb64(parts[0]))
            claims = json.loads(_unb64(parts[1]))
            raw = _unb64(parts[2])
        except ValueError as exc:
            raise ValueError("malformed JWT") from exc
        if not isinstance(header, dict) or header.get("alg") != "ES256" or len(raw) != 64:
            raise ValueError("unsupported signing algorithm")
        if header.get("kid") != self.kid:
            raise ValueError("signed by an unknown key")
        signature = encode_dss_signature(
            int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")
        )
        try:
            self._key.public_key().verify(
                signature, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256())
            )
        except InvalidSignature:
            raise ValueError("invalid signature") from None
        if not isinstance(claims, dict):
            raise ValueError("malformed claims")
        return claims

    # --- TokenRequest -------------------------------------------------------------------------
    def token_request(
        self,
        service_account: dict[str, Any],
        request: dict[str, Any],
        now: float,
        lookup: Lookup,
    ) -> dict[str, Any]:
        """The TokenRequest answer (``status.token``, ``status.expirationTimestamp``)."""
        meta = service_account.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        spec = dict(request.get("spec") or {})
        audiences = [str(a) for a in spec.get("audiences") or []] or list(API_AUDIENCES)
        expiration = spec.get("expirationSeconds")
        expiration = DEFAULT_EXPIRATION if expiration is None else expiration
        if not isinstance(expiration, int) or expiration < MIN_EXPIRATION:
            raise TokenRequestError(
                f"spec.expirationSeconds: Invalid value: {expiration!r}: may not specify a "
                f"duration less than {MIN_EXPIRATION} seconds"
            )
        if expiration > MAX_EXPIRATION:
            raise TokenRequestError(
                f"spec.expirationSeconds: Invalid value: {expiration}: may not specify a "
                f"duration larger than {MAX_EXPIRATION} seconds"
            )
        k8s: dict[str, Any] = {
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": meta.get("uid")},
        }
        bound = spec.get("boundObjectRef")
        if bound:
            kind = bound.get("kind")
            if kind != "Pod":
                raise TokenRequestError(
                    f'spec.boundObjectRef.kind: Unsupported value: "{kind}": supported values: '
                    '"Pod"'
                )
            pod = lookup("pods", namespace, str(bound.get("name") or ""))
            pod_uid = (pod or {}).get("metadata", {}).get("uid")
            if pod is None or (bound.get("uid") and bound.get("uid") != pod_uid):
                raise TokenRequestError(
                    f'spec.boundObjectRef: pod "{bound.get("name")}" not found'
                    + (f" with uid {bound.get('uid')}" if bound.get("uid") else "")
                )
            k8s["pod"] = {"name": bound.get("name"), "uid": pod_uid}
        issued = int(now)
        exp = issued + expiration
        claims = {
            "aud": audiences,
            "exp": exp,
            "iat": issued,
            "iss": self.issuer,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": k8s,
            "nbf": issued,
            "sub": f"{SA_PREFIX}{namespace}:{name}",
        }
        spec["audiences"] = audiences
        spec["expirationSeconds"] = expiration
        return {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
            "spec": spec,
            "status": {"token": self.sign(claims), "expirationTimestamp": time_from_epoch(exp)},
        }

    # --- TokenReview --------------------------------------------------------------------------
    def token_review(self, review: dict[str, Any], now: float, lookup: Lookup) -> dict[str, Any]:
        """The review with its ``status`` filled in (never an error: an unauthenticated
        answer says why in ``status.error``)."""
        spec = dict(review.get("spec") or {})
        token = str(spec.get("token") or "")
        wanted = [str(a) for a in spec.get("audiences") or []]
        out = {
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
        }
        try:
            status = self._review(token, wanted or list(API_AUDIENCES), now, lookup)
            if not wanted:
                status["audiences"] = list(API_AUDIENCES)
        except ValueError as exc:
            status = {"user": {}, "error": f"[invalid bearer token, {exc}]"}
        out["status"] = status
        return out

    def authenticate(self, token: str, now: float, lookup: Lookup) -> dict[str, Any]:
        """The user a bearer token sent to the API server names (its ``userInfo``), as
        kube-apiserver's service-account authenticator checks it: the token must be valid for
        the API audience (tokens minted for another audience, such as the status server's,
        are not credentials for the API). ValueError when it is not a valid token."""
        user: dict[str, Any] = self._review(token, list(API_AUDIENCES), now, lookup)["user"]
        return user

    def _review(self, token: str, wanted: list[str], now: float, lookup: Lookup) -> dict[str, Any]:
        if not token:
            raise ValueError("token is empty")
        claims = self.verify(token)
        if claims.get("iss") != self.issuer:
            raise ValueError(f"token issuer {claims.get('iss')!r} is not {self.issuer!r}")
        exp, nbf = claims.get("exp"), claims.get("nbf")
        if not isinstance(exp, int) or now >= exp:
            raise ValueError("service account token has expired")
        if isinstance(nbf, int) and now < nbf:
            raise ValueError("service account token is not valid yet")
        aud = claims.get("aud")
        token_audiences = [aud] if isinstance(aud, str) else [str(a) for a in aud or []]
        common = [a for a in wanted if a in token_audiences]
        if not common:
            raise ValueError(
                f"token audiences {json.dumps(token_audiences)} is invalid for the target "
                f"audiences {json.dumps(wanted)}"
            )
        k8s = claims.get("kubernetes.io") or {}
        namespace = str(k8s.get("namespace") or "")
        sa = k8s.get("serviceaccount") or {}
        sa_name = str(sa.get("name") or "")
        live_sa = lookup("serviceaccounts", namespace, sa_name)
        if live_sa is None:
            raise ValueError(f'serviceaccounts "{sa_name}" not found')
        if sa.get("uid") and (live_sa.get("metadata") or {}).get("uid") != sa.get("uid"):
            raise ValueError(f"service account UID ({sa.get('uid')}) does not match claim")
        extra: dict[str, list[str]] = {
            "authentication.kubernetes.io/credential-id": [f"JTI={claims.get('jti')}"]
        }
        pod = k8s.get("pod")
        if pod:
            live_pod = lookup("pods", namespace, str(pod.get("name") or ""))
            if live_pod is None or (live_pod.get("metadata") or {}).get("uid") != pod.get("uid"):
                raise ValueError(f'pod "{pod.get("name")}" not found (the token is bound to it)')
            extra["authentication.kubernetes.io/pod-name"] = [str(pod.get("name"))]
            extra["authentication.kubernetes.io/pod-uid"] = [str(pod.get("uid"))]
        return {
            "authenticated": True,
            "user": {
                "username": f"{SA_PREFIX}{namespace}:{sa_name}",
                "uid": str(sa.get("uid") or ""),
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{namespace}",
                    "system:authenticated",
                ],
                "extra": extra,
            },
            "audiences": common,
        }
