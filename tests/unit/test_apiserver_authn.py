"""The request checks of the local API server one by one (trainer/local/apiserver/auth/authn.py);
tests/integration/test_apiserver_authn.py drives them over HTTPS."""

from __future__ import annotations

from typing import Any

import pytest
from multidict import CIMultiDict

from trainer.local.apiserver.auth import authn
from trainer.local.apiserver.errors import APIError

PORT = 6443
SA = authn.User(
    "system:serviceaccount:ns:sa",
    groups=("system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"),
)


def no_rbac(_plural: str) -> list[dict[str, Any]]:
    return []


def code_of(call: Any) -> int:
    with pytest.raises(APIError) as err:
        call()
    return err.value.code


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.0.0.1:6443", "localhost", "localhost:6443", "LocalHost:6443", "[::1]:6443"],
)
def test_loopback_hosts_pass(host: str) -> None:
    authn.check_host({"Host": host}, PORT)


@pytest.mark.parametrize(
    "host",
    ["", "evil.example", "evil.example:6443", "127.0.0.1:6444", "localhost.evil:6443", "::1"],
)
def test_other_hosts_are_403(host: str) -> None:
    assert code_of(lambda: authn.check_host({"Host": host}, PORT)) == 403


def test_origin_must_be_the_server_itself() -> None:
    authn.check_host({"Host": "127.0.0.1", "Origin": "https://127.0.0.1:6443"}, PORT)
    for origin in ("https://127.0.0.1", "http://127.0.0.1:6443", "https://evil.example", "null"):
        headers = {"Host": "127.0.0.1", "Origin": origin}
        assert code_of(lambda h=headers: authn.check_host(h, PORT)) == 403


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Bearer", None),
        ("Basic abc", None),
        ("", None),
    ],
)
def test_bearer_token(header: str, token: str | None) -> None:
    assert authn.bearer_token({"Authorization": header}) == token


@pytest.mark.parametrize("path", ["/healthz", "/livez/ping", "/readyz/", "/readyz"])
def test_probes(path: str) -> None:
    assert authn.is_probe(path)


@pytest.mark.parametrize("path", ["/healthzz", "/api", "/", "/version"])
def test_not_probes(path: str) -> None:
    assert not authn.is_probe(path)


@pytest.mark.parametrize(
    ("method", "media", "body", "ok"),
    [
        ("POST", "application/json", True, True),
        ("POST", "application/yaml", True, True),
        ("POST", "application/vnd.kubernetes.protobuf", True, True),
        ("POST", "text/plain", True, False),
        ("POST", "application/x-www-form-urlencoded", True, False),
        ("POST", "multipart/form-data", True, False),
        ("POST", None, True, False),
        ("POST", None, False, False),
        ("PUT", "application/json", True, True),
        ("PUT", "application/merge-patch+json", True, False),
        ("PATCH", "application/merge-patch+json", True, True),
        ("PATCH", "application/json-patch+json", True, True),
        ("PATCH", "application/strategic-merge-patch+json", True, True),
        ("PATCH", "application/apply-patch+yaml", True, True),
        ("PATCH", "application/json", True, False),
        ("DELETE", None, False, True),
        ("DELETE", "application/json", True, True),
        ("DELETE", "text/plain", True, False),
        ("GET", "text/plain", False, True),
    ],
)
def test_content_types(method: str, media: str | None, body: bool, ok: bool) -> None:
    def check() -> None:
        authn.check_content_type(method, media, has_body=body)

    if ok:
        check()
    else:
        assert code_of(check) == 415


def test_the_log_extension_takes_octet_stream_only() -> None:
    authn.check_content_type("POST", "application/octet-stream", has_body=True, log_append=True)
    with pytest.raises(APIError) as err:
        authn.check_content_type("POST", "text/plain", has_body=True, log_append=True)
    assert err.value.reason == "UnsupportedMediaType"


@pytest.mark.parametrize("token", ["", " ", "a b", "tab\tx", "nl\n"])
def test_unusable_tokens(token: str) -> None:
    with pytest.raises(ValueError, match="token"):
        authn.valid_token(token)


def test_the_admin_may_do_anything_and_others_only_what_rbac_grants() -> None:
    secret = authn.Attributes("get", resource="secrets", namespace="ns", name="ssh")
    authn.authorize(authn.ADMIN, secret, no_rbac)
    with pytest.raises(APIError) as err:
        authn.authorize(SA, secret, no_rbac)
    assert err.value.code == 403
    assert err.value.message == (
        'secrets "ssh" is forbidden: User "system:serviceaccount:ns:sa" cannot get resource '
        '"secrets" in API group "" in the namespace "ns"'
    )
    # What kube-apiserver's bootstrap roles give every authenticated user.
    authn.authorize(SA, authn.Attributes("get", path="/apis/batch/v1"), no_rbac)
    authn.authorize(
        SA,
        authn.Attributes("create", group="authentication.k8s.io", resource="selfsubjectreviews"),
        no_rbac,
    )
    with pytest.raises(APIError, match='cannot get path "/metrics"'):
        authn.authorize(SA, authn.Attributes("get", path="/metrics"), no_rbac)


def test_rbac_bindings_are_honoured() -> None:
    objects = {
        "clusterroles": [
            {
                "metadata": {"name": "pods"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}],
            }
        ],
        "clusterrolebindings": [
            {
                "metadata": {"name": "pods"},
                "roleRef": {"kind": "ClusterRole", "name": "pods"},
                "subjects": [{"kind": "ServiceAccount", "namespace": "ns", "name": "sa"}],
            }
        ],
    }

    def rbac(plural: str) -> list[dict[str, Any]]:
        return objects.get(plural, [])

    authn.authorize(SA, authn.Attributes("create", resource="pods", namespace="x"), rbac)
    with pytest.raises(APIError):
        authn.authorize(SA, authn.Attributes("delete", resource="pods", namespace="x"), rbac)


def test_impersonation() -> None:
    as_sa = CIMultiDict({"Impersonate-User": "system:serviceaccount:ns:sa"})
    user = authn.impersonate(authn.ADMIN, as_sa, no_rbac)
    assert user.name == "system:serviceaccount:ns:sa"
    assert user.groups == SA.groups
    as_admin = CIMultiDict({"Impersonate-User": "trainer-local-admin"})
    as_admin.add("Impersonate-Group", "system:masters")
    with pytest.raises(APIError) as err:
        authn.impersonate(SA, as_admin, no_rbac)
    assert err.value.code == 403
    assert authn.impersonate(SA, CIMultiDict(), no_rbac) is SA
    with pytest.raises(APIError) as err:
        authn.impersonate(SA, CIMultiDict({"Impersonate-Group": "system:masters"}), no_rbac)
    assert err.value.code == 400


def test_self_reviews() -> None:
    who = authn.self_review(SA, ("authentication.k8s.io", "selfsubjectreviews"), {}, no_rbac)
    assert who["status"]["userInfo"]["username"] == SA.name
    can = authn.self_review(
        SA,
        ("authorization.k8s.io", "selfsubjectaccessreviews"),
        {"spec": {"resourceAttributes": {"verb": "list", "resource": "secrets"}}},
        no_rbac,
    )
    assert can["status"] == {"allowed": False}
    with pytest.raises(APIError) as err:
        authn.self_review(SA, ("authorization.k8s.io", "selfsubjectaccessreviews"), {}, no_rbac)
    assert err.value.code == 422
