"""The status server's look at a token before any TokenReview (trainer/kube/satoken.py,
docs/status-server.md "Authentication"): tokens the local API server mints pass; anything
that cannot be a service-account token for the audience is refused, and says why."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest

from trainer.kube.satoken import MalformedToken, TokenClaims, precheck
from trainer.local.apiserver.auth.tokens import TokenIssuer

AUD = "trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/job/status"
NOW = time.time()


def b64(data: bytes | dict[str, Any] | list[Any] | str) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def claims(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "aud": [AUD],
        "exp": int(NOW) + 600,
        "iat": int(NOW),
        "nbf": int(NOW),
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": "system:serviceaccount:team:default",
        "kubernetes.io": {"namespace": "team", "serviceaccount": {"name": "default", "uid": "u"}},
    }
    out.update(over)
    return {k: v for k, v in out.items() if v is not None}


def jwt(payload: Any, header: Any = None, signature: bytes = b"s" * 64) -> str:
    return ".".join([b64(header or {"alg": "ES256", "kid": "k"}), b64(payload), b64(signature)])


def minted(issuer: TokenIssuer, bound_pod: bool) -> str:
    lookup = {
        ("serviceaccounts", "team", "default"): {"metadata": {"uid": "sa"}},
        ("pods", "team", "job-node-0-0"): {"metadata": {"uid": "pod-uid"}},
    }
    spec: dict[str, Any] = {"audiences": [AUD, "other"], "expirationSeconds": 600}
    if bound_pod:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": "job-node-0-0"}
    answer = issuer.token_request(
        {"metadata": {"name": "default", "namespace": "team", "uid": "sa"}},
        {"spec": spec},
        NOW,
        lambda plural, ns, name: lookup.get((plural, ns, name)),
    )
    return str(answer["status"]["token"])


@pytest.mark.parametrize("bound_pod", [False, True], ids=["unbound", "pod-bound"])
def test_tokens_the_api_server_mints_pass(bound_pod: bool) -> None:
    token = minted(TokenIssuer(), bound_pod)
    assert precheck(token, AUD, NOW) == TokenClaims(
        "team", "default", int(NOW) + 600, "job-node-0-0" if bound_pod else None
    )


def test_a_forged_signature_passes_the_precheck() -> None:
    # Only the TokenReview can tell: the precheck does not hold the signing key.
    assert precheck(jwt(claims()), AUD, NOW).namespace == "team"
    rsa = jwt(claims(aud=AUD), {"alg": "RS256"}, b"r" * 256)  # aud as one string
    assert precheck(rsa, AUD, NOW).service_account == "default"


def test_expiry_has_the_api_servers_leeway() -> None:
    token = jwt(claims(exp=int(NOW) - 30))
    assert precheck(token, AUD, NOW).expires == int(NOW) - 30  # the review decides
    with pytest.raises(MalformedToken, match="expired"):
        precheck(jwt(claims(exp=int(NOW) - 61)), AUD, NOW)


K8S = "kubernetes.io"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", "not a JWT"),
        ("not-a-jwt", "not a JWT"),
        ("a.b.c.d", "not a JWT"),
        ("a.b", "not a JWT"),
        ("x" * 20000, "too long"),
        ("..", "header is not base64url"),
        ("a+b.c.d", "header is not base64url"),
        (jwt(claims()).replace(".", "=.", 1), "header is not base64url"),  # padded
        (".".join([b64(b"{not json"), b64(claims()), b64(b"s" * 64)]), "header is not JSON"),
        (".".join([b64(bytes([0xFF, 0xFE])), b64(claims()), b64(b"s" * 64)]), "header is not JSON"),
        (jwt(claims(), header=["ES256"]), "header is not a JSON object"),
        (
            ".".join([b64({"alg": "ES256"}), b64([1]), b64(b"s" * 64)]),
            "payload is not a JSON object",
        ),
        (jwt(claims(), header={"typ": "JWT"}), "no service-account signing algorithm"),
        (jwt(claims(), header={"alg": "none"}), "no service-account signing algorithm"),
        (jwt(claims(), header={"alg": "HS256"}), "no service-account signing algorithm"),
        (jwt(claims(), signature=b"s" * 63), "not an ES256 signature"),
        (jwt(claims(iss=None)), "no issuer"),
        (jwt(claims(iss=7)), "no issuer"),
        (jwt(claims(sub="alice")), "subject is not a service account"),
        (jwt(claims(sub="system:serviceaccount:team")), "subject is not a service account"),
        (jwt(claims(sub="system:serviceaccount:Team:default")), "not a service account"),
        (jwt(claims(sub="system:serviceaccount:team:a:b")), "not a service account"),
        (jwt(claims(aud=None)), "aud claim is not a list of strings"),
        (jwt(claims(aud=[AUD, 3])), "aud claim is not a list of strings"),
        (jwt(claims(aud=["https://kubernetes.default.svc"])), "not for this audience"),
        (jwt(claims(aud=[AUD.replace("job", "other")])), "not for this audience"),
        (jwt(claims(exp=None)), "exp claim is not a number"),
        (jwt(claims(exp="tomorrow")), "exp claim is not a number"),
        (jwt(claims(exp=True)), "exp claim is not a number"),
        (jwt(claims(nbf=int(NOW) + 3600)), "not valid yet"),
        (jwt(claims(iat="now")), "iat claim is not a number"),
        (jwt(claims(**{K8S: None})), "no kubernetes.io claims"),
        (jwt(claims(**{K8S: {"namespace": "team"}})), "kubernetes.io.serviceaccount"),
        (
            jwt(claims(**{K8S: {"namespace": "x", "serviceaccount": {"name": "default"}}})),
            "do not match the subject",
        ),
        (
            jwt(claims(**{K8S: {"namespace": "team", "serviceaccount": {"name": "other"}}})),
            "do not match the subject",
        ),
        (
            jwt(
                claims(
                    **{
                        K8S: {
                            "namespace": "team",
                            "serviceaccount": {"name": "default"},
                            "pod": {"uid": "u"},
                        }
                    }
                )
            ),
            "kubernetes.io.pod has no name",
        ),
        (
            # a legacy Secret-based token: no aud, no exp, its own claim names
            jwt(
                {
                    "iss": "kubernetes/serviceaccount",
                    "sub": "system:serviceaccount:team:default",
                    "kubernetes.io/serviceaccount/namespace": "team",
                },
                {"alg": "RS256"},
                b"r" * 256,
            ),
            "aud claim",
        ),
    ],
)
def test_what_cannot_be_a_service_account_token_is_refused(token: str, reason: str) -> None:
    with pytest.raises(MalformedToken, match=reason) as refused:
        precheck(token, AUD, NOW)
    assert token not in str(refused.value) or not token
