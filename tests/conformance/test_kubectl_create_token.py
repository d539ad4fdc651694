"""``kubectl create token`` against the embedded API server (docs/local-plane.md, "Service
account tokens"): kubectl 1.32 sends the TokenRequest as protobuf, the server answers JSON,
and the token it prints authenticates (``kubectl auth whoami --token``) exactly when it is
meant for the API and, for a bound token, while its pod exists."""

from __future__ import annotations

import base64
import itertools
import json
from typing import Any

import pytest

from .conftest import KUBECTL, SKIP_REASON, Kubectl

pytestmark = pytest.mark.skipif(KUBECTL is None, reason=SKIP_REASON)

_names = itertools.count(1)
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


def claims(token: str) -> dict[str, Any]:
    """The JWT's payload (read only to check what the server put in it)."""
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(
        base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    )
    return decoded


def create_token(kubectl: Kubectl, *args: str) -> str:
    token = kubectl.run("create", "token", "default", *args).stdout.strip()
    assert token.count(".") == 2, token
    return token


def whoami(kubectl: Kubectl, token: str) -> dict[str, Any] | str:
    """The user kubectl says the token is, or kubectl's error when the server refuses it."""
    shown = kubectl.run("auth", "whoami", "--token", token, "-o", "json", check=False)
    if shown.returncode != 0:
        return shown.stderr.strip()
    user: dict[str, Any] = json.loads(shown.stdout)["status"]["userInfo"]
    return user


def test_a_default_token_is_for_the_api_and_lasts_an_hour(kubectl: Kubectl) -> None:
    token = create_token(kubectl)
    c = claims(token)
    assert c["aud"] == [API_AUDIENCE]
    assert c["sub"] == "system:serviceaccount:default:default"
    assert c["exp"] - c["iat"] == 3600
    user = whoami(kubectl, token)
    assert isinstance(user, dict), user
    assert user["username"] == "system:serviceaccount:default:default"
    assert "system:serviceaccounts:default" in user["groups"]


def test_audience_and_duration(kubectl: Kubectl) -> None:
    token = create_token(kubectl, "--audience", "X", "--duration", "10m")
    c = claims(token)
    assert (c["aud"], c["exp"] - c["iat"]) == (["X"], 600)
    # A token for another audience is not a credential for the API.
    assert whoami(kubectl, token) == "error: You must be logged in to the server (Unauthorized)"


def test_a_token_bound_to_a_pod_stops_working_when_the_pod_goes(kubectl: Kubectl) -> None:
    pod = f"bound-{next(_names)}"
    manifest = (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}}}\n"
        "spec: {containers: [{name: c, image: busybox}]}\n"
    )
    kubectl.run("create", "-f", "-", stdin=manifest)
    uid = kubectl.run("get", "pod", pod, "-o", "jsonpath={.metadata.uid}").stdout
    token = create_token(kubectl, "--bound-object-kind", "Pod", "--bound-object-name", pod)
    assert claims(token)["kubernetes.io"]["pod"] == {"name": pod, "uid": uid}
    user = whoami(kubectl, token)
    assert isinstance(user, dict), user
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == [pod]
    assert user["extra"]["authentication.kubernetes.io/pod-uid"] == [uid]

    kubectl.run("delete", "pod", pod, "--wait=false")
    assert whoami(kubectl, token) == "error: You must be logged in to the server (Unauthorized)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["default", "--duration", "1m"],
            "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than "
            "600 seconds",
        ),
        (
            ["default", "--bound-object-kind", "Pod", "--bound-object-name", "absent"],
            'spec.boundObjectRef: pod "absent" not found',
        ),
        (
            ["default", "--bound-object-kind", "Secret", "--bound-object-name", "s"],
            'spec.boundObjectRef.kind: Unsupported value: "Secret": supported values: "Pod"',
        ),
        (["absent"], 'serviceaccounts "absent" not found'),
    ],
    ids=["too-short", "no-such-pod", "secret", "no-such-account"],
)
def test_refused_requests_say_why(kubectl: Kubectl, args: list[str], message: str) -> None:
    shown = kubectl.run("create", "token", *args, check=False)
    assert shown.returncode == 1
    assert shown.stdout == ""
    assert shown.stderr.startswith("error: failed to create token: "), shown.stderr
    assert message in shown.stderr
