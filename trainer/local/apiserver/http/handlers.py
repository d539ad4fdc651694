"""One handler per verb and subresource, and the table that picks it.

:data:`HANDLERS` maps ``(verb, subresource)`` to a handler (``ANY`` subresource: the main
resource and every subresource the route accepted, unless a more precise entry exists);
:data:`BY_RESOURCE` answers the review kinds, which store nothing, whatever the path.
A handler gets a :class:`Call` (the decoded request and what the server gives it) and
answers a response; every object rule is the storage core's. Adding a verb or a
subresource is one entry here and one handler (and, for a new subresource, one entry in
:data:`~.routing.SUBRESOURCES`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from trainer.local.apiserver import metadata
from trainer.local.apiserver.auth import authn
from trainer.local.apiserver.auth.authz import subject_access_review
from trainer.local.apiserver.auth.tokens import TokenIssuer, TokenRequestError
from trainer.local.apiserver.core.rules import WriteOptions
from trainer.local.apiserver.core.storage import Storage
from trainer.local.apiserver.errors import APIError, method_not_allowed
from trainer.local.apiserver.http import partial, table
from trainer.local.apiserver.http.logs import PodLogs
from trainer.local.apiserver.http.responses import (
    json_or_empty,
    json_response,
    manager_from_agent,
    read_body,
)
from trainer.local.apiserver.http.routing import Route
from trainer.local.apiserver.http.watch import serve_watch
from trainer.local.apiserver.resources import served, served_copy
from trainer.local.apiserver.selectors import flag

ANY = "*"
RBAC_GROUP = "rbac.authorization.k8s.io"
TOKEN_REVIEWS = ("authentication.k8s.io", "tokenreviews")
ACCESS_REVIEWS = ("authorization.k8s.io", "subjectaccessreviews")
SELF_REVIEWS = ("authentication.k8s.io", "selfsubjectreviews")
SELF_ACCESS_REVIEWS = ("authorization.k8s.io", "selfsubjectaccessreviews")


@dataclass(slots=True)
class Call:
    """One resource request, decoded, with what the server lends its handler."""

    storage: Storage
    tokens: TokenIssuer
    logs: PodLogs
    max_body: int
    request: web.Request
    route: Route
    verb: str
    query: dict[str, str]
    user: authn.User | None

    def rbac(self, plural: str) -> Iterable[dict[str, Any]]:
        """The stored RBAC objects of a kind (roles, bindings...)."""
        return self.storage.store.items((RBAC_GROUP, plural))

    def lookup(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A stored core object (the token checks read ServiceAccounts, Secrets, Pods)."""
        return self.storage.store.get(("", plural), namespace, name)

    async def body(self) -> Any:
        return await read_body(self.request, self.max_body)

    def write_options(self) -> WriteOptions:
        """The query options every write shares (dry run, field manager, validation, and
        ``force`` for an apply patch), with an empty list for the write's warnings."""
        return WriteOptions(
            manager=self.query.get("fieldManager")
            or manager_from_agent(self.request.headers.get("User-Agent", "")),
            dry_run=self.query.get("dryRun") == "All",
            # kube-apiserver's default when a client sends none (kubectl sends Strict)
            field_validation=self.query.get("fieldValidation") or "Warn",
            force=flag(self.query.get("force")),
        )


Handler = Callable[[Call], Awaitable[web.StreamResponse]]


def respond(c: Call, body: dict[str, Any], *, is_list: bool = False) -> web.Response:
    """A read's answer: the object or list, or a Table or its metadata alone
    (:mod:`~trainer.local.apiserver.http.partial`) when the client asks for one."""
    if partial.wanted(c.request.headers.get("Accept", "")):
        return json_response(partial.partial_list(body) if is_list else partial.partial(body))
    if "as=Table" in c.request.headers.get("Accept", ""):
        include = c.request.query.get("includeObject", "Metadata")
        rt = c.route.rt
        return json_response(
            table.to_table(c.storage, rt, body, is_list=is_list, include_object=include)
        )
    return json_response(body)


# --- reads ------------------------------------------------------------------------------------
async def get(c: Call) -> web.StreamResponse:
    rt = c.route.rt
    return respond(c, served(rt, c.storage.get_or_404(rt, c.route.namespace, c.route.name)))


async def list_(c: Call) -> web.StreamResponse:
    body = c.storage.list_objects(c.route.rt, c.route.namespace, c.query)
    return respond(c, body, is_list=True)


async def watch(c: Call) -> web.StreamResponse:
    return await serve_watch(c.storage, c.request, c.route, c.query)


async def read_log(c: Call) -> web.StreamResponse:
    r = c.route
    return await c.logs.serve(c.storage, c.request, r.rt, r.namespace, r.name, c.query)


# --- writes -----------------------------------------------------------------------------------
async def create(c: Call) -> web.StreamResponse:
    options = c.write_options()
    rt = c.route.rt
    obj, _ = await c.storage.create(rt, c.route.namespace, await c.body(), options)
    return json_response(served(rt, obj), status=201, warnings=options.warnings)


async def create_on_subresource(c: Call) -> web.StreamResponse:
    await c.body()  # a body that cannot be read is answered first, as for any write
    raise method_not_allowed("create is not supported on a subresource")


async def append_log(c: Call) -> web.StreamResponse:
    """This server's extension for the local executor (it plays the kubelet): append to a
    container's log, served back by GET .../log."""
    r = c.route
    c.storage.get_or_404(r.rt, r.namespace, r.name)
    text = (await c.request.read()).decode(errors="replace")
    run = c.query.get("restartCount", "")
    container = c.query.get("container", "")
    c.logs.append(r.namespace, r.name, container, text, int(run) if run.isdigit() else None)
    return json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"}, status=201)


async def bind(c: Call) -> web.StreamResponse:
    """``pods/{name}/binding``: assign the pod to a node (a scheduler's one write)."""
    options = c.write_options()
    r = c.route
    await c.storage.bind(r.rt, r.namespace, r.name, await c.body(), options)
    return json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"}, status=201)


async def update(c: Call) -> web.StreamResponse:
    options = c.write_options()
    r = c.route
    obj = await c.storage.update(
        r.rt, r.namespace, r.name, await c.body(), options, subresource=r.subresource
    )
    return json_response(served(r.rt, obj), warnings=options.warnings)


async def patch(c: Call) -> web.StreamResponse:
    options = c.write_options()
    r = c.route
    obj, created = await c.storage.patch(
        r.rt,
        r.namespace,
        r.name,
        c.request.content_type,
        await c.body(),
        options,
        subresource=r.subresource,
    )
    return json_response(
        served(r.rt, obj), status=201 if created else 200, warnings=options.warnings
    )


async def delete(c: Call) -> web.StreamResponse:
    r = c.route
    options = metadata.delete_options(
        json_or_empty(await c.request.read(), c.request.content_type), c.query
    )
    result = await c.storage.delete(
        r.rt,
        r.namespace,
        r.name,
        policy=options["propagationPolicy"],
        preconditions=options.get("preconditions") or {},
        dry_run=c.write_options().dry_run or "All" in (options.get("dryRun") or []),
        grace=options.get("gracePeriodSeconds"),
    )
    return json_response(result)


async def delete_collection(c: Call) -> web.StreamResponse:
    rt = c.route.rt
    options = metadata.delete_options(
        json_or_empty(await c.request.read(), c.request.content_type), c.query
    )
    items = await c.storage.delete_collection(
        rt,
        c.route.namespace,
        c.query,
        policy=options["propagationPolicy"],
        dry_run=c.write_options().dry_run,
    )
    return json_response(c.storage.list_body(rt, [served_copy(rt, o) for o in items]))


# --- reviews and tokens: answers made, nothing stored -----------------------------------------
async def tokens(c: Call) -> web.StreamResponse:
    """TokenRequest (``serviceaccounts/{name}/token``) and TokenReview."""
    r = c.route
    kind = "TokenRequest" if r.subresource == "token" else r.rt.kind
    body = metadata.check_review("authentication.k8s.io", kind, await c.body())
    now = c.storage.hooks.clock.now().timestamp()
    if r.subresource == "token":
        sa = c.storage.get_or_404(r.rt, r.namespace, r.name)
        try:
            answer = c.tokens.token_request(sa, body, now, c.lookup)
        except TokenRequestError as exc:
            raise APIError(
                422, "Invalid", f'TokenRequest.authentication.k8s.io "{r.name}" is invalid: {exc}'
            ) from None
        return json_response(answer, status=201)
    return json_response(c.tokens.token_review(body, now, c.lookup), status=201)


async def self_review(c: Call) -> web.StreamResponse:
    """SelfSubjectReview and SelfSubjectAccessReview: about the caller."""
    body = await c.body()
    if not isinstance(body, dict):
        raise APIError(400, "BadRequest", "the request body must be a JSON object")
    assert c.user is not None  # resource requests are always authenticated
    return json_response(authn.self_review(c.user, c.route.rt.key, body, c.rbac), status=201)


async def access_review(c: Call) -> web.StreamResponse:
    """SubjectAccessReview: may a named user do something (RBAC as stored)."""
    rt = c.route.rt
    review = metadata.check_review(rt.group, rt.kind, await c.body())
    return json_response(subject_access_review(review, c.rbac), status=201)


BY_RESOURCE: dict[tuple[str, str], Handler] = {
    TOKEN_REVIEWS: tokens,
    SELF_REVIEWS: self_review,
    SELF_ACCESS_REVIEWS: self_review,
    ACCESS_REVIEWS: access_review,
}

HANDLERS: dict[tuple[str, str], Handler] = {
    ("get", ANY): get,
    ("get", "log"): read_log,
    ("list", ANY): list_,
    ("watch", ANY): watch,
    ("create", ""): create,
    ("create", ANY): create_on_subresource,
    ("create", "log"): append_log,
    ("create", "token"): tokens,
    ("create", "binding"): bind,
    ("update", ANY): update,
    ("patch", ANY): patch,
    ("delete", ANY): delete,
    ("deletecollection", ANY): delete_collection,
}


def handler_for(route: Route, verb: str) -> Handler | None:
    """The handler of a request whose verb the resource serves; None: 405."""
    by_resource = BY_RESOURCE.get(route.rt.key)
    if by_resource is not None:
        return by_resource
    return HANDLERS.get((verb, route.subresource)) or HANDLERS.get((verb, ANY))
