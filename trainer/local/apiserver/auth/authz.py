"""SubjectAccessReview (``POST /apis/authorization.k8s.io/v1/subjectaccessreviews``) answered
by RBAC over the stored ClusterRoles, Roles and their bindings, as kube-apiserver's RBAC
authorizer answers it.

Supported: ``resourceAttributes`` (namespace, verb, group, resource, subresource, name) and
``nonResourceAttributes`` (path, verb); subjects of kind User, Group and ServiceAccount (whose
user name is ``system:serviceaccount:<ns>:<name>``); ``*`` in verbs, apiGroups, resources and
nonResourceURLs, and ``prefix*`` in nonResourceURLs. Not modelled: aggregated ClusterRoles
(their rules are whatever is stored) and the ``system:masters`` superuser group's implicit
grant beyond RBAC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

Items = Callable[[str], Iterable[dict[str, Any]]]  # plural -> stored RBAC objects


def _subject_matches(subject: dict[str, Any], user: str, groups: set[str]) -> bool:
    kind = subject.get("kind")
    name = str(subject.get("name") or "")
    if kind == "User":
        return name == user
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        return user == f"system:serviceaccount:{subject.get('namespace') or ''}:{name}"
    return False


def _matches(values: Iterable[str], wanted: str) -> bool:
    return any(v in ("*", wanted) for v in values)


def _rule_allows(rule: dict[str, Any], attrs: dict[str, Any], non_resource: bool) -> bool:
    verb = str(attrs.get("verb") or "")
    if not _matches(rule.get("verbs") or [], verb):
        return False
    if non_resource:
        path = str(attrs.get("path") or "")
        for url in rule.get("nonResourceURLs") or []:
            if url in (path, "*") or (url.endswith("*") and path.startswith(url[:-1])):
                return True
        return False
    if rule.get("nonResourceURLs") and not rule.get("resources"):
        return False
    resource = str(attrs.get("resource") or "")
    if attrs.get("subresource"):
        resource += "/" + str(attrs["subresource"])
    if not _matches(rule.get("apiGroups") or [], str(attrs.get("group") or "")):
        return False
    if not _matches(rule.get("resources") or [], resource):
        return False
    names = rule.get("resourceNames") or []
    return not names or str(attrs.get("name") or "") in names


def _namespaced_name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def subject_access_review(review: dict[str, Any], items: Items) -> dict[str, Any]:
    """The review with ``status`` filled in: allowed with the binding that allows it, or
    denied with no reason (RBAC never denies explicitly; it just finds no rule)."""
    spec = dict(review.get("spec") or {})
    user = str(spec.get("user") or "")
    groups = {str(g) for g in spec.get("groups") or []}
    non_resource = spec.get("nonResourceAttributes") is not None
    attrs: dict[str, Any] = dict(
        (spec.get("nonResourceAttributes") if non_resource else spec.get("resourceAttributes"))
        or {}
    )
    namespace = "" if non_resource else str(attrs.get("namespace") or "")
    roles = {str((r.get("metadata") or {}).get("name")): r for r in items("clusterroles")}
    ns_roles = {
        (
            str((r.get("metadata") or {}).get("namespace")),
            str((r.get("metadata") or {}).get("name")),
        ): r
        for r in items("roles")
    }
    bindings: list[tuple[str, dict[str, Any]]] = [
        ("ClusterRoleBinding", b) for b in items("clusterrolebindings")
    ]
    if namespace:
        bindings += [
            ("RoleBinding", b)
            for b in items("rolebindings")
            if (b.get("metadata") or {}).get("namespace") == namespace
        ]
    status: dict[str, Any] = {"allowed": False}
    for kind, binding in bindings:
        subjects = binding.get("subjects") or []
        matched = next((s for s in subjects if _subject_matches(s, user, groups)), None)
        if matched is None:
            continue
        ref = binding.get("roleRef") or {}
        role = (
            roles.get(str(ref.get("name")))
            if ref.get("kind") == "ClusterRole"
            else ns_roles.get((namespace, str(ref.get("name"))))
        )
        if role is None:
            continue
        if any(_rule_allows(rule, attrs, non_resource) for rule in role.get("rules") or []):
            meta = binding.get("metadata") or {}
            where = f' of {ref.get("kind")} "{ref.get("name")}"'
            who = f'{matched.get("kind")} "{matched.get("name")}"'
            scope = f' in namespace "{meta.get("namespace")}"' if kind == "RoleBinding" else ""
            status = {
                "allowed": True,
                "reason": f'RBAC: allowed by {kind} "{meta.get("name")}"{where} to {who}{scope}',
            }
            break
    return {
        "kind": "SubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }
