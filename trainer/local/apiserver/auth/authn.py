"""Who may talk to the local API server, and what they may do: the checks every request
passes before it is served (docs/local-plane.md, "Security of the local control plane").

In the order the server applies them:

1. **Host and Origin** (:func:`check_host`): the ``Host`` header must name the loopback
   address the server listens on (``127.0.0.1``, ``localhost`` or ``[::1]``, with or without
   its port), and an ``Origin`` header, when a browser sends one, must be the server's own
   origin. Anything else is a page reached under another name (DNS rebinding) or another
   site; it is answered 403 Forbidden (a Kubernetes ``Status``; every Kubernetes client shows
   a 403 as such, where a 421 Misdirected Request would be an unknown error to them).
2. **Authentication** (:class:`Authenticator`): a bearer token, either the plane's token
   (made at random per server unless given, kept only in the kubeconfig and the processes the
   plane starts) naming the administrator (:data:`ADMIN`, group ``system:masters``), or a
   service-account token minted by TokenRequest (:mod:`.tokens`) for the API audience, naming
   ``system:serviceaccount:NS:NAME``. The health probes ``/healthz``, ``/livez``, ``/readyz``
   (and their sub-paths) need none; every other request without a valid token gets 401.
3. **Authorization** (:func:`authorize`): the administrator may do everything; any other user
   is authorised by the RBAC objects stored in the server (:mod:`.authz`), plus what
   kube-apiserver's bootstrap roles grant every authenticated user (``system:discovery``,
   ``system:basic-user``, ``system:public-info-viewer``: discovery, ``/version``, OpenAPI and
   the self reviews). Otherwise 403 with kube-apiserver's message.
4. **Content type** (:func:`check_content_type`): a request body must be in a media type
   kube-apiserver decodes for that verb; anything else (``text/plain``, form types, or none)
   is 415 UnsupportedMediaType. Browsers send only those three without a CORS preflight, so a
   cross-site request can never carry a body the server reads.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer.local.apiserver.auth.authz import subject_access_review
from trainer.local.apiserver.auth.tokens import SA_PREFIX, Lookup, TokenIssuer
from trainer.local.apiserver.errors import APIError, forbidden, unauthorized

PROBES = ("/healthz", "/livez", "/readyz")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")

ADMIN_GROUPS = ("system:masters", "system:authenticated")

RBACItems = Callable[[str], Iterable[dict[str, Any]]]
"""plural -> the stored RBAC objects of that kind (roles, clusterroles, their bindings)."""


@dataclass(frozen=True)
class User:
    """An authenticated user, as a TokenReview or SelfSubjectReview names it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, list[str]] = field(default_factory=dict, hash=False, compare=False)

    @property
    def admin(self) -> bool:
        return "system:masters" in self.groups

    def info(self) -> dict[str, Any]:
        """The ``userInfo`` of a review."""
        out: dict[str, Any] = {"username": self.name, "groups": list(self.groups)}
        if self.uid:
            out["uid"] = self.uid
        if self.extra:
            out["extra"] = {k: list(v) for k, v in self.extra.items()}
        return out


ADMIN = User("trainer-local-admin", groups=ADMIN_GROUPS)


def is_probe(path: str) -> bool:
    """Whether ``path`` is a health probe, served without credentials."""
    return any(path == p or path.startswith(p + "/") for p in PROBES)


# --- 1. Host and Origin ----------------------------------------------------------------------
def check_host(headers: Mapping[str, str], port: int) -> None:
    """Refuse (403) a request whose Host is not this server's loopback address, or whose
    Origin is not this server's own origin."""
    host = (headers.get("Host") or "").strip().lower()
    if not _loopback(host, port):
        raise forbidden(
            f"the Host header {host!r} does not name this server: the local API server answers "
            f"only requests addressed to 127.0.0.1, localhost or [::1] (port {port})"
        )
    origin = headers.get("Origin")
    if origin is not None:
        scheme, _, rest = origin.strip().lower().partition("://")
        if scheme != "https" or not rest or not _loopback(rest, port, need_port=True):
            raise forbidden(
                f"requests from the web origin {origin!r} are not accepted by the local API server"
            )


def _loopback(host: str, port: int, *, need_port: bool = False) -> bool:
    return host in _with_port(port) or (not need_port and host in LOOPBACK_HOSTS)


@functools.lru_cache(maxsize=8)
def _with_port(port: int) -> frozenset[str]:
    return frozenset(f"{name}:{port}" for name in LOOPBACK_HOSTS)


# --- 2. Authentication -----------------------------------------------------------------------
def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (None when absent)."""
    scheme, _, token = (headers.get("Authorization") or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def valid_token(token: str) -> str:
    """A plane token given by the user, checked to be sendable in an HTTP header."""
    if not token or not token.isprintable() or any(c.isspace() for c in token):
        raise ValueError("the token must be non-empty printable text without spaces")
    return token


class Authenticator:
    """Bearer tokens to users: the plane token is the administrator; service-account tokens
    are checked as a TokenReview for the API audience checks them."""

    def __init__(
        self, token: str, issuer: TokenIssuer, lookup: Lookup, now: Callable[[], float]
    ) -> None:
        self._token = token.encode()
        self._issuer = issuer
        self._lookup = lookup
        self._now = now

    def authenticate(self, headers: Mapping[str, str]) -> User:
        token = bearer_token(headers)
        if token is None:
            raise unauthorized()
        if secrets.compare_digest(token.encode(), self._token):
            return ADMIN
        try:
            user = self._issuer.authenticate(token, self._now(), self._lookup)
        except ValueError:
            raise unauthorized() from None
        return User(
            str(user["username"]),
            str(user.get("uid") or ""),
            tuple(str(g) for g in user.get("groups") or ()),
            dict(user.get("extra") or {}),
        )


def impersonate(user: User, headers: Any, rbac: RBACItems) -> User:
    """The user a request acts as: ``user``, or the one its ``Impersonate-User`` (and
    ``Impersonate-Group``) headers name when ``user`` may impersonate them (``kubectl --as``),
    as kube-apiserver decides it: verb ``impersonate`` on ``users``, ``serviceaccounts`` or
    ``groups``. 403 otherwise."""
    name = headers.get("Impersonate-User")
    groups = list(headers.getall("Impersonate-Group", ()))
    if name is None:
        if groups or headers.get("Impersonate-Uid"):
            raise APIError(
                400, "BadRequest", "requested impersonation of groups or uid without a user"
            )
        return user
    checks: list[Attributes] = []
    sa = name.removeprefix(SA_PREFIX) if name.startswith(SA_PREFIX) else None
    if sa is not None:
        namespace, _, sa_name = sa.partition(":")
        checks.append(
            Attributes("impersonate", resource="serviceaccounts", namespace=namespace, name=sa_name)
        )
        implied = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]
    else:
        checks.append(Attributes("impersonate", resource="users", name=name))
        implied = []
    checks += [Attributes("impersonate", resource="groups", name=g) for g in groups]
    for attrs in checks:
        if not allowed(user, attrs, rbac):
            raise _denied(user, attrs)
    all_groups = [*implied, *groups]
    if "system:authenticated" not in all_groups and name != "system:anonymous":
        all_groups.append("system:authenticated")
    return User(name, groups=tuple(dict.fromkeys(all_groups)))


# --- 3. Authorization ------------------------------------------------------------------------
@dataclass(frozen=True)
class Attributes:
    """What a request does, as an authorizer sees it (resource or non-resource)."""

    verb: str
    path: str = ""
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def resource_request(self) -> bool:
        return bool(self.resource)


# What kube-apiserver's bootstrap ClusterRoles grant every authenticated user
# (system:discovery, system:public-info-viewer, system:basic-user), not stored as objects.
_DISCOVERY = ("/api", "/apis", "/openapi", "/version")
_SELF_REVIEWS = {
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
}


def _bootstrap_allows(attrs: Attributes) -> bool:
    if attrs.resource_request:
        return attrs.verb == "create" and (attrs.group, attrs.resource) in _SELF_REVIEWS
    return attrs.verb == "get" and any(
        attrs.path == p or attrs.path.startswith(p + "/") for p in _DISCOVERY
    )


def authorize(user: User, attrs: Attributes, rbac: RBACItems) -> None:
    """Allow, or raise 403 with kube-apiserver's message."""
    if not allowed(user, attrs, rbac):
        raise _denied(user, attrs)


def allowed(user: User, attrs: Attributes, rbac: RBACItems) -> bool:
    """Whether ``user`` may do ``attrs``: the administrator, the bootstrap grants, RBAC."""
    if user.admin or _bootstrap_allows(attrs):
        return True
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups)}
    if attrs.resource_request:
        spec["resourceAttributes"] = {
            "verb": attrs.verb,
            "group": attrs.group,
            "resource": attrs.resource,
            "subresource": attrs.subresource,
            "namespace": attrs.namespace,
            "name": attrs.name,
        }
    else:
        spec["nonResourceAttributes"] = {"verb": attrs.verb, "path": attrs.path}
    return bool(subject_access_review({"spec": spec}, rbac)["status"].get("allowed"))


def self_review(
    user: User, kind: tuple[str, str], review: dict[str, Any], rbac: RBACItems
) -> dict[str, Any]:
    """The answer to a SelfSubjectReview (``kubectl auth whoami``) or a
    SelfSubjectAccessReview (``kubectl auth can-i``) of ``user``."""
    if kind == ("authentication.k8s.io", "selfsubjectreviews"):
        return {
            "kind": "SelfSubjectReview",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "status": {"userInfo": user.info()},
        }
    spec = dict(review.get("spec") or {})
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    if isinstance(resource, dict):
        attrs = Attributes(
            str(resource.get("verb") or ""),
            group=str(resource.get("group") or ""),
            resource=str(resource.get("resource") or ""),
            subresource=str(resource.get("subresource") or ""),
            namespace=str(resource.get("namespace") or ""),
            name=str(resource.get("name") or ""),
        )
    elif isinstance(non_resource, dict):
        attrs = Attributes(
            str(non_resource.get("verb") or ""), path=str(non_resource.get("path") or "")
        )
    else:
        raise APIError(
            422,
            "Invalid",
            "SelfSubjectAccessReview.authorization.k8s.io is invalid: spec.resourceAttributes: "
            'Invalid value: "null": exactly one of nonResourceAttributes or '
            "resourceAttributes must be specified",
        )
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": {"allowed": allowed(user, attrs, rbac)},
    }


def _denied(user: User, attrs: Attributes) -> APIError:
    if not attrs.resource_request:
        return forbidden(f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"')
    qualified = f"{attrs.resource}.{attrs.group}" if attrs.group else attrs.resource
    subject = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
    scope = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    err = forbidden(
        f'{subject} is forbidden: User "{user.name}" cannot {attrs.verb} resource '
        f'"{resource}" in API group "{attrs.group}" {scope}'
    )
    err.details = {"name": attrs.name, "kind": attrs.resource} if attrs.name else {}
    err.details["kind"] = attrs.resource
    if attrs.group:
        err.details["group"] = attrs.group
    return err


# --- 4. Content type -------------------------------------------------------------------------
JSON = "application/json"
YAML = "application/yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
LOG_APPEND = "application/octet-stream"
"""The body of this server's pod-log extension (the executor appending a container's log)."""

ACCEPTED = {
    "POST": (JSON, YAML, PROTOBUF),
    "PUT": (JSON, YAML, PROTOBUF),
    "PATCH": (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH),
    "DELETE": (JSON, PROTOBUF),  # DeleteOptions; client-go's typed clients send protobuf
}


def check_content_type(
    method: str, content_type: str | None, *, has_body: bool, log_append: bool = False
) -> None:
    """Raise 415 unless a request that carries (or needs) a body names a media type the
    server decodes for ``method``. ``content_type`` is the media type without parameters,
    None when the header is absent."""
    if method in ("POST", "PUT", "PATCH"):
        pass
    elif method != "DELETE" or not has_body:
        return
    accepted = (LOG_APPEND,) if log_append else ACCEPTED[method]
    if content_type not in accepted:
        raise APIError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types "
            f"include: {', '.join(accepted)}"
            + (f' (got "{content_type}")' if content_type else " (no Content-Type was sent)"),
        )
