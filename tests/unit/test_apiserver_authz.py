"""The local API server's SubjectAccessReview: RBAC over stored roles and bindings."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.local.apiserver.auth.authz import subject_access_review

ROLES: dict[str, list[dict[str, Any]]] = {
    "clusterroles": [
        {
            "metadata": {"name": "reader"},
            "rules": [
                {
                    "apiGroups": ["trainer.kubeflow.org"],
                    "resources": ["trainjobs"],
                    "verbs": ["get", "list"],
                },
                {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]},
            ],
        },
        {
            "metadata": {"name": "status-writer"},
            "rules": [
                {
                    "apiGroups": ["*"],
                    "resources": ["trainjobs/status"],
                    "verbs": ["*"],
                    "resourceNames": ["one"],
                }
            ],
        },
    ],
    "clusterrolebindings": [
        {
            "metadata": {"name": "readers"},
            "roleRef": {"kind": "ClusterRole", "name": "reader"},
            "subjects": [{"kind": "Group", "name": "team"}],
        },
    ],
    "roles": [],
    "rolebindings": [
        {
            "metadata": {"name": "w", "namespace": "ml"},
            "roleRef": {"kind": "ClusterRole", "name": "status-writer"},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "ml"}],
        },
    ],
}


def review(user: str, groups: list[str], **attrs: Any) -> dict[str, Any]:
    key = "nonResourceAttributes" if "path" in attrs else "resourceAttributes"
    spec = {"user": user, "groups": groups, key: attrs}
    status: dict[str, Any] = subject_access_review({"spec": spec}, lambda plural: ROLES[plural])[
        "status"
    ]
    return status


@pytest.mark.parametrize(
    ("user", "groups", "attrs", "allowed"),
    [
        (
            "ann",
            ["team"],
            {
                "verb": "get",
                "group": "trainer.kubeflow.org",
                "resource": "trainjobs",
                "namespace": "ml",
            },
            True,
        ),
        (
            "ann",
            ["team"],
            {
                "verb": "delete",
                "group": "trainer.kubeflow.org",
                "resource": "trainjobs",
                "namespace": "ml",
            },
            False,
        ),
        (
            "ann",
            ["other"],
            {"verb": "get", "group": "trainer.kubeflow.org", "resource": "trainjobs"},
            False,
        ),
        ("ann", ["team"], {"verb": "get", "path": "/metrics"}, True),
        ("ann", ["team"], {"verb": "get", "path": "/debug/pprof"}, True),
        ("ann", ["team"], {"verb": "post", "path": "/metrics"}, False),
        (
            "system:serviceaccount:ml:bot",
            [],
            {
                "verb": "patch",
                "group": "trainer.kubeflow.org",
                "resource": "trainjobs",
                "subresource": "status",
                "name": "one",
                "namespace": "ml",
            },
            True,
        ),
        (
            "system:serviceaccount:ml:bot",
            [],
            {
                "verb": "patch",
                "group": "trainer.kubeflow.org",
                "resource": "trainjobs",
                "subresource": "status",
                "name": "two",
                "namespace": "ml",
            },
            False,
        ),
        (
            "system:serviceaccount:ml:bot",
            [],
            {
                "verb": "patch",
                "group": "trainer.kubeflow.org",
                "resource": "trainjobs",
                "subresource": "status",
                "name": "one",
                "namespace": "x",
            },
            False,
        ),
    ],
)
def test_rbac_decisions(user: str, groups: list[str], attrs: dict[str, Any], allowed: bool) -> None:
    assert review(user, groups, **attrs)["allowed"] is allowed


def test_the_reason_names_the_binding() -> None:
    status = review("ann", ["team"], verb="get", path="/metrics")
    assert status["reason"] == (
        'RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "reader" to Group "team"'
    )
