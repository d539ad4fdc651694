"""An in-memory Kubernetes API server speaking the real REST protocol over HTTPS on loopback.

It serves the built-in kinds this project needs and every CRD registered through the
apiextensions API, with real semantics: resourceVersions and optimistic concurrency,
generation, status subresources, label/field selectors and paging, merge / JSON / strategic
merge patches and server-side apply, finalizers and ownerReference garbage collection,
namespace lifecycle, watches with history, bookmarks and 410, dry runs, and admission
webhooks. Test hooks (:attr:`APIServer.hooks`) expose the request log, fault injection and
the clock; :meth:`APIServer.objects` reads stored objects directly. It serves HTTPS with its
own CA and requires a bearer token (:mod:`.authn`, :mod:`.tls`): :meth:`APIServer.kubeconfig`
carries both to clients.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import logging
import os
import secrets
import ssl
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import yaml
from aiohttp import web

from trainer.api.safeload import Limits, load_json, load_yaml
from trainer.local.apiserver import apply as ssa
from trainer.local.apiserver import authn, builtin, crd, discovery, gc, metadata, protobuf, table
from trainer.local.apiserver.admission import Admission
from trainer.local.apiserver.authz import subject_access_review
from trainer.local.apiserver.errors import (
    APIError,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    internal,
    invalid,
    method_not_allowed,
    not_found,
    too_large,
    unsupported_media_type,
)
from trainer.local.apiserver.hooks import Hooks, RequestRecord
from trainer.local.apiserver.patch import (
    APPLY,
    JSON,
    MERGE,
    STRATEGIC,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from trainer.local.apiserver.persistence import Persistence
from trainer.local.apiserver.resources import ResourceType, served, served_copy
from trainer.local.apiserver.selectors import flag, matcher
from trainer.local.apiserver.statefile import StateFileError
from trainer.local.apiserver.store import Event, Store
from trainer.local.apiserver.tls import ServingTLS
from trainer.local.apiserver.tokens import TokenIssuer, TokenRequestError
from trainer.local.apiserver.watch import serve_watch

log = logging.getLogger("trainer.apiserver")

PATCH_RETRIES = 5


class StaleWrite(APIError):
    """The stored object changed while a write was being admitted."""

    def __init__(self, plural: str, group: str, name: str) -> None:
        err = conflict(plural, group, name, MODIFIED)
        super().__init__(err.code, err.reason, err.message, err.details)


MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)
GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
DEFAULT_MAX_BODY = 3 * 1024 * 1024
TOKEN_REVIEWS = ("authentication.k8s.io", "tokenreviews")
ACCESS_REVIEWS = ("authorization.k8s.io", "subjectaccessreviews")
SELF_REVIEWS = ("authentication.k8s.io", "selfsubjectreviews")
SELF_ACCESS_REVIEWS = ("authorization.k8s.io", "selfsubjectaccessreviews")
RBAC_GROUP = "rbac.authorization.k8s.io"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass
class Route:
    rt: ResourceType
    namespace: str  # "" for cluster scope or all namespaces
    name: str
    subresource: str
    legacy_watch: bool = False


def _now_rfc3339(server: APIServer) -> str:
    return server.hooks.clock.timestamp()


class APIServer:
    """The embedded API server. ``await start()`` binds 127.0.0.1 on ``port`` (0: any free)
    and serves HTTPS. ``token`` is the administrator's bearer token (random when not given);
    clients get it and the CA from :meth:`kubeconfig`, or from :meth:`client_ssl_context` and
    :meth:`auth_headers`."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        history: int = 10_000,
        state_file: str | None = None,
        reset_damaged_state: bool = False,
    ) -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the local API server listens on loopback only")
        self.host = host
        self.port = port
        self.token = authn.valid_token(token) if token is not None else secrets.token_urlsafe(32)
        self.tls = ServingTLS()
        self.max_body = max_body
        self.registry = builtin.new_registry()
        self.store = Store(history=history)
        self.hooks = Hooks()
        self.admission = Admission(self)
        self.gc = gc.GarbageCollector(self)
        self.tokens = TokenIssuer()
        self.authenticator = authn.Authenticator(
            self.token, self.tokens, self._lookup, lambda: self.hooks.clock.now().timestamp()
        )
        self.pod_logs: dict[tuple[str, str, str], list[str]] = {}
        self._log_waiters: dict[tuple[str, str, str], asyncio.Event] = {}
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._stopping = asyncio.Event()
        self.state_file = state_file
        self._persistence: Persistence | None = None
        self._bootstrap(reset_damaged_state)

    # --- lifecycle --------------------------------------------------------------------------
    def _bootstrap(self, reset_damaged_state: bool) -> None:
        if self.state_file:
            self._persistence = Persistence(
                self, self.state_file, reset_damaged=reset_damaged_state
            )
            try:
                self._persistence.load()
                self._bootstrap_objects()
            except APIError as err:  # the first writes could not be stored
                self._persistence.close()
                raise StateFileError(
                    self.state_file, f"cannot be written ({err.message})"
                ) from None
            except BaseException:
                self._persistence.close()
                raise
        else:
            self._bootstrap_objects()

    def _bootstrap_objects(self) -> None:
        for ns in SYSTEM_NAMESPACES:
            if self.store.get(("", "namespaces"), "", ns) is None:
                self.create_direct("v1", "Namespace", {"metadata": {"name": ns}})
        for namespace in self.store.items(("", "namespaces"), None):
            self._default_service_account(namespace["metadata"]["name"])

    async def start(self) -> str:
        app = web.Application(client_max_size=self.max_body)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        self._site = web.TCPSite(
            self._runner, self.host, self.port, ssl_context=self.tls.server_context()
        )
        await self._site.start()
        server = self._site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1]
        self.gc.start()
        log.info("local API server listening on %s", self.url)
        return self.url

    async def stop(self) -> None:
        self._stopping.set()
        self.store.close_watchers()
        await self.gc.stop()
        await self.admission.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._persistence is not None:
            self._persistence.close()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"https://{host}:{self.port}"

    def client_ssl_context(self) -> ssl.SSLContext:
        """An SSL context for clients of this server (trusts its CA only)."""
        return self.tls.client_context()

    def auth_headers(self) -> dict[str, str]:
        """The administrator's ``Authorization`` header."""
        return {"Authorization": f"Bearer {self.token}"}

    def kubeconfig(
        self, context: str = "trainer-local", namespace: str = "default"
    ) -> dict[str, Any]:
        """A kubeconfig for this server, with its CA and the administrator's token (kubectl,
        kubernetes_asyncio and the kubernetes client accept it with no extra flags)."""
        cluster = {"server": self.url, "certificate-authority-data": self.tls.ca_data()}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": cluster}],
            "users": [{"name": context, "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": context, "user": context, "namespace": namespace},
                }
            ],
            "current-context": context,
            "preferences": {},
        }

    def write_kubeconfig(self, path: str, **kw: Any) -> None:
        """Write :meth:`kubeconfig` to ``path`` atomically. It holds the administrator's
        token: the file is created with mode 0600 (never readable by others, not even for a
        moment) and then renamed over ``path``."""
        directory, base = os.path.split(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                yaml.safe_dump(self.kubeconfig(**kw), fh, sort_keys=False)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    # --- direct access for tests and bootstrapping -----------------------------------------
    def resource(self, api_version: str, kind_or_plural: str) -> ResourceType:
        group, _, version = api_version.rpartition("/")
        rt = self.registry.get(group, version, kind_or_plural) or self.registry.by_kind(
            api_version, kind_or_plural
        )
        if rt is None:
            raise KeyError(f"{api_version} {kind_or_plural} is not served")
        return rt

    def objects(
        self, api_version: str, kind_or_plural: str, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Copies of the stored objects of a kind (one namespace or all)."""
        rt = self.resource(api_version, kind_or_plural)
        return [served_copy(rt, o) for o in self.store.items(rt.key, namespace)]

    def get_object(
        self, api_version: str, kind_or_plural: str, namespace: str, name: str
    ) -> dict[str, Any] | None:
        rt = self.resource(api_version, kind_or_plural)
        obj = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        return served_copy(rt, obj) if obj is not None else None

    def create_direct(self, api_version: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create without HTTP or admission (bootstrapping, tests)."""
        rt = self.resource(api_version, kind)
        body = {"apiVersion": api_version, "kind": rt.kind, **copy.deepcopy(obj)}
        ns = (body.get("metadata") or {}).get("namespace", "default" if rt.namespaced else "")
        return self._create_sync(rt, ns if rt.namespaced else "", body, manager="bootstrap")

    # --- HTTP -------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        verb, resource, group, ns, name, manager = request.method.lower(), "", "", "", "", ""
        code = 500
        try:
            user = self._check_auth(request)
            route = self._route(request.path)
            if route is None:
                if user is not None:
                    attrs = authn.Attributes(request.method.lower(), path=request.path)
                    authn.authorize(user, attrs, self._rbac)
                resp = await self._non_resource(request)
                code = resp.status
                return resp
            if isinstance(route, web.StreamResponse):
                code = route.status
                return route
            query = {
                k: v[-1] for k, v in parse_qs(request.query_string, keep_blank_values=True).items()
            }
            verb = self._verb(request.method, route, query)
            group, ns, name = route.rt.group, route.namespace, route.name
            resource = route.rt.plural + (f"/{route.subresource}" if route.subresource else "")
            manager = query.get("fieldManager", "")
            self._check_request(request, user, route, verb)
            fault = self.hooks.fault_for(verb, resource)
            if fault is not None:
                err = APIError(fault.code, _reason_for(fault.code), fault.message)
                code = fault.code
                return _status_response(err)
            resp = await self._dispatch(request, route, verb, query)
            code = resp.status
            return resp
        except APIError as err:
            code = err.code
            return _status_response(err)
        except web.HTTPRequestEntityTooLarge:
            code = 413
            return _status_response(too_large(self.max_body))
        except (ConnectionResetError, asyncio.CancelledError):
            code = 499
            raise
        except Exception as exc:  # the server never drops a request on a bug
            log.exception("internal error serving %s %s", request.method, request.path)
            code = 500
            return _status_response(internal(f"{type(exc).__name__}: {exc}"))
        finally:
            self.hooks.record(
                RequestRecord(
                    verb,
                    group,
                    resource,
                    ns,
                    name,
                    code,
                    manager,
                    request.headers.get("User-Agent", ""),
                    request.path,
                )
            )
            log.debug(
                "%s %s %s -> %d (%.1f ms)",
                verb,
                request.path,
                request.query_string,
                code,
                (time.perf_counter() - started) * 1000,
            )

    def _check_auth(self, request: web.Request) -> authn.User | None:
        """The Host check and the caller (None for a health probe); 403 / 401 otherwise."""
        authn.check_host(request.headers, self.port)
        if authn.is_probe(request.path):
            return None
        return authn.impersonate(
            self.authenticator.authenticate(request.headers), request.headers, self._rbac
        )

    def _check_request(
        self, request: web.Request, user: authn.User | None, route: Route, verb: str
    ) -> None:
        """May ``user`` do this (RBAC), and is the body in a media type it can be in."""
        if user is not None:
            attrs = authn.Attributes(
                verb,
                group=route.rt.group,
                resource=route.rt.plural,
                subresource=route.subresource,
                namespace=route.namespace,
                name=route.name,
            )
            authn.authorize(user, attrs, self._rbac)
        media = request.content_type if "Content-Type" in request.headers else None
        authn.check_content_type(
            request.method,
            media,
            has_body=request.body_exists,
            log_append=route.subresource == "log",
        )

    def _rbac(self, plural: str) -> Iterable[dict[str, Any]]:
        return self.store.items((RBAC_GROUP, plural))

    def _route(self, path: str) -> Route | web.StreamResponse | None:
        parts = [p for p in path.split("/") if p]
        if not parts or parts[0] not in ("api", "apis"):
            return None
        if parts[0] == "api":
            if len(parts) < 3:
                return None
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) < 4:
                return None
            group, version, rest = parts[1], parts[2], parts[3:]
        legacy_watch = False
        if rest and rest[0] == "watch":
            legacy_watch = True
            rest = rest[1:]
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces" and group == "":
            # /api/v1/namespaces/{ns}/{plural}... (but /namespaces/{name}/status is the namespace)
            if rest[2] in ("status", "finalize") and len(rest) == 3:
                pass
            else:
                namespace, rest = rest[1], rest[2:]
        elif len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest:
            raise not_found("", group, path)
        plural = rest[0]
        rt = self.registry.get(group, version, plural)
        if rt is None:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        if len(rest) > 3:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        if namespace and not rt.namespaced:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        if sub == "token" and rt.token:
            return Route(rt, namespace, name, sub, legacy_watch)
        if sub and sub not in ("status", "log", "finalize"):
            raise APIError(
                404, "NotFound", f"the server could not find the requested resource ({sub})"
            )
        if sub == "status" and not rt.status:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        if sub == "log" and not rt.log:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        return Route(rt, namespace, name, sub, legacy_watch)

    @staticmethod
    def _verb(method: str, route: Route, query: dict[str, str]) -> str:
        if method == "GET":
            if route.legacy_watch or flag(query.get("watch")):
                return "watch"
            return "get" if route.name else "list"
        return {
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete" if route.name else "deletecollection",
        }.get(method, method.lower())

    async def _non_resource(self, request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            raise method_not_allowed(f"{request.method} is not allowed on {request.path}")
        body = discovery.non_resource(self, request)
        if body is None:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        if isinstance(body, web.StreamResponse):
            return body
        return _json(body)

    async def _dispatch(
        self, request: web.Request, route: Route, verb: str, query: dict[str, str]
    ) -> web.StreamResponse:
        rt = route.rt
        if verb not in rt.verbs or (route.subresource == "token" and verb != "create"):
            raise method_not_allowed(
                f"the server does not allow this method on the requested resource ({verb})"
            )
        if route.subresource == "token" or rt.key == TOKEN_REVIEWS:
            return await self._tokens(request, route)
        if rt.key in (SELF_REVIEWS, SELF_ACCESS_REVIEWS):
            body = await self._body(request)
            if not isinstance(body, dict):
                raise APIError(400, "BadRequest", "the request body must be a JSON object")
            user = self._check_auth(request)  # who is asking (checked already in _handle)
            assert user is not None
            return _json(authn.self_review(user, rt.key, body, self._rbac), status=201)
        if rt.key == ACCESS_REVIEWS:
            review = metadata.check_review(rt.group, rt.kind, await self._body(request))
            rbac = "rbac.authorization.k8s.io"
            return _json(
                subject_access_review(review, lambda plural: self.store.items((rbac, plural))),
                status=201,
            )
        if verb == "watch":
            return await serve_watch(self, request, route, query)
        if verb == "list":
            return self._respond(
                request, rt, self.list_objects(rt, route.namespace, query), is_list=True
            )
        if verb == "get":
            if route.subresource == "log":
                return await self._pod_log(request, route, query)
            obj = self._get_or_404(rt, route.namespace, route.name)
            return self._respond(request, rt, served(rt, obj))
        if verb == "create" and route.subresource == "log":
            # This server's extension for the local executor (it plays the kubelet): append
            # to a container's log, served back by GET .../log.
            self._get_or_404(rt, route.namespace, route.name)
            text = (await request.read()).decode(errors="replace")
            self.append_log(route.namespace, route.name, query.get("container", ""), text)
            return _json({"kind": "Status", "apiVersion": "v1", "status": "Success"}, status=201)
        body = await self._body(request) if verb in ("create", "update", "patch") else None
        dry_run = query.get("dryRun") == "All"
        manager = query.get("fieldManager") or _manager_from_agent(
            request.headers.get("User-Agent", "")
        )
        field_validation = query.get("fieldValidation", "Strict")
        warnings: list[str] = []
        if verb == "create":
            if route.name and route.subresource:
                raise method_not_allowed("create is not supported on a subresource")
            obj, created = await self.create(
                rt,
                route.namespace,
                body,
                manager=manager,
                dry_run=dry_run,
                field_validation=field_validation,
                warnings=warnings,
            )
            return _json(served(rt, obj), status=201, warnings=warnings)
        if verb == "update":
            obj = await self.update(
                rt,
                route.namespace,
                route.name,
                body,
                subresource=route.subresource,
                manager=manager,
                dry_run=dry_run,
                field_validation=field_validation,
                warnings=warnings,
            )
            return _json(served(rt, obj), warnings=warnings)
        if verb == "patch":
            force = flag(query.get("force"))
            obj, created = await self.patch(
                rt,
                route.namespace,
                route.name,
                request.content_type,
                body,
                subresource=route.subresource,
                manager=manager,
                force=force,
                dry_run=dry_run,
                field_validation=field_validation,
                warnings=warnings,
            )
            return _json(served(rt, obj), status=201 if created else 200, warnings=warnings)
        if verb == "delete":
            options = metadata.delete_options(_json_or_empty(await request.read()), query)
            policy = options["propagationPolicy"]
            preconditions = options.get("preconditions") or {}
            result = await self.delete(
                rt,
                route.namespace,
                route.name,
                policy=policy,
                preconditions=preconditions,
                dry_run=dry_run or "All" in (options.get("dryRun") or []),
            )
            return _json(result)
        if verb == "deletecollection":
            options = metadata.delete_options(_json_or_empty(await request.read()), query)
            policy = options["propagationPolicy"]
            match = matcher(query.get("labelSelector"), query.get("fieldSelector"))
            items = self.store.select(rt.key, route.namespace or None, match)
            for obj in items:
                meta = obj["metadata"]
                try:
                    await self.delete(
                        rt,
                        meta.get("namespace") or "",
                        meta["name"],
                        policy=policy,
                        dry_run=dry_run,
                    )
                except APIError as err:
                    if err.code >= 500:  # not persisted: never report it deleted
                        raise
            return _json(self._list_body(rt, [served_copy(rt, o) for o in items]))
        raise method_not_allowed(f"{request.method} is not supported")

    def _lookup(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get(("", plural), namespace, name)

    async def _tokens(self, request: web.Request, route: Route) -> web.StreamResponse:
        """TokenRequest (``serviceaccounts/{name}/token``) and TokenReview: answers made,
        nothing stored."""
        kind = "TokenRequest" if route.subresource == "token" else route.rt.kind
        body = metadata.check_review("authentication.k8s.io", kind, await self._body(request))
        now = self.hooks.clock.now().timestamp()
        if route.subresource == "token":
            sa = self._get_or_404(route.rt, route.namespace, route.name)
            try:
                answer = self.tokens.token_request(sa, body, now, self._lookup)
            except TokenRequestError as exc:
                raise APIError(
                    422,
                    "Invalid",
                    f'TokenRequest.authentication.k8s.io "{route.name}" is invalid: {exc}',
                ) from None
            return _json(answer, status=201)
        return _json(self.tokens.token_review(body, now, self._lookup), status=201)

    async def _body(self, request: web.Request) -> Any:
        if request.content_length is not None and request.content_length > self.max_body:
            raise too_large(self.max_body)
        raw = await request.read()
        if len(raw) > self.max_body:
            raise too_large(self.max_body)
        if not raw:
            raise bad_request("the request body is empty")
        if request.content_type == protobuf.CONTENT_TYPE:
            return protobuf.decode(raw)
        try:
            if request.content_type in (APPLY, "application/yaml"):
                return load_yaml(raw, "body", Limits(max_bytes=self.max_body))
            return load_json(raw, "body", Limits(max_bytes=self.max_body))
        except (ValueError, yaml.YAMLError) as exc:
            raise bad_request(
                f"the request body is not valid "
                f"{'YAML' if request.content_type == APPLY else 'JSON'}: {exc}"
            ) from None

    # --- object helpers ---------------------------------------------------------------------
    def _get_or_404(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.store.get(rt.key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise not_found(rt.plural, rt.group, name)
        return obj

    def _respond(
        self, request: web.Request, rt: ResourceType, body: dict[str, Any], *, is_list: bool = False
    ) -> web.Response:
        accept = request.headers.get("Accept", "")
        if "as=Table" in accept:
            include = request.query.get("includeObject", "Metadata")
            return _json(table.to_table(self, rt, body, is_list=is_list, include_object=include))
        return _json(body)

    def _list_body(
        self,
        rt: ResourceType,
        items: list[dict[str, Any]],
        *,
        cont: str = "",
        remaining: int | None = None,
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
        if cont:
            meta["continue"] = cont
        if remaining is not None:
            meta["remainingItemCount"] = remaining
        return {
            "apiVersion": rt.api_version,
            "kind": rt.list_kind,
            "metadata": meta,
            "items": items,
        }

    def list_objects(
        self, rt: ResourceType, namespace: str, query: dict[str, str]
    ) -> dict[str, Any]:
        match = matcher(query.get("labelSelector"), query.get("fieldSelector"))
        limit = metadata.int_param(query, "limit") or 0
        start: tuple[str, str] | None = None
        token = query.get("continue")
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                start = (decoded["ns"], decoded["name"])
                if int(decoded["rv"]) < self.store.oldest_rv:
                    raise APIError(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter.",
                    )
            except (ValueError, KeyError, TypeError):
                raise bad_request("invalid continue token") from None
        items = self.store.select(rt.key, namespace or None, match, start)
        remaining = len(items) - limit if 0 < limit < len(items) else 0
        if remaining:
            del items[limit:]
        cont = ""
        if remaining:
            last = items[-1]["metadata"]
            cont = base64.urlsafe_b64encode(
                json.dumps(
                    {"rv": self.store.rv, "ns": last.get("namespace") or "", "name": last["name"]}
                ).encode()
            ).decode()
        items = [served(rt, o) for o in items]
        return self._list_body(rt, items, cont=cont, remaining=remaining if cont else None)

    # --- writes -----------------------------------------------------------------------------
    def _check_namespace(self, rt: ResourceType, namespace: str, *, creating: bool) -> None:
        if not rt.namespaced:
            return
        if not namespace:
            raise bad_request(
                "the namespace of the object does not match the namespace on the request"
            )
        ns = self.store.get(("", "namespaces"), "", namespace)
        if ns is None:
            raise not_found("namespaces", "", namespace)
        if creating and (ns.get("metadata") or {}).get("deletionTimestamp"):
            raise forbidden(
                f"{rt.plural} is forbidden: unable to create new content in namespace "
                f"{namespace} because it is being terminated"
            )

    def _check_body(
        self, rt: ResourceType, body: Any, namespace: str, name: str = ""
    ) -> dict[str, Any]:
        return metadata.check(rt, body, namespace, name)

    async def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        *,
        manager: str = "",
        dry_run: bool = False,
        field_validation: str = "Strict",
        warnings: list[str] | None = None,
        applied: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        obj = self._check_body(rt, body, namespace)
        meta = obj["metadata"]
        namespace = meta.get("namespace", "") if rt.namespaced else ""
        self._check_namespace(rt, namespace, creating=True)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(rt.kind, rt.group, "", builtin.validate_name(rt, ""))
            # SimpleNameGenerator: at most 58 characters of the prefix, then 5 random ones.
            meta["name"] = prefix[:58] + "".join(secrets.choice(GENERATE_CHARS) for _ in range(5))
        for key in (
            "uid",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now_rfc3339(self)
        meta["generation"] = 1
        if rt.status and rt.kind not in ("Namespace",):
            obj.pop("status", None)
        obj = await self.admission.admit(
            rt,
            "CREATE",
            obj,
            None,
            dry_run=dry_run,
            field_validation=field_validation,
            warnings=warnings if warnings is not None else [],
        )
        if self.store.get(rt.key, namespace, meta["name"]) is not None:
            raise already_exists(rt.plural, rt.group, meta["name"])
        if not applied:
            ssa.track_update(rt, None, obj, manager or "unknown", now=_now_rfc3339(self))
        if dry_run:
            meta.pop("uid", None)
            return obj, True
        self.store.put(rt.key, obj, None)
        self._after_write(rt, obj, None)
        return obj, True

    def _create_sync(
        self, rt: ResourceType, namespace: str, body: dict[str, Any], manager: str
    ) -> dict[str, Any]:
        obj = self._check_body(rt, body, namespace)
        meta = obj["metadata"]
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now_rfc3339(self)
        meta["generation"] = 1
        builtin.prepare(rt, obj)
        ssa.track_update(rt, None, obj, manager, now=_now_rfc3339(self))
        self.store.put(rt.key, obj, None)
        self._after_write(rt, obj, None)
        return obj

    async def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        manager: str = "",
        dry_run: bool = False,
        field_validation: str = "Strict",
        warnings: list[str] | None = None,
        check_rv: bool = True,
    ) -> dict[str, Any]:
        old = self._get_or_404(rt, namespace, name)
        new = self._check_body(rt, body, namespace, name)
        new["metadata"]["name"] = name
        rv = new["metadata"].get("resourceVersion")
        if check_rv and rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt.plural,
                rt.group,
                name,
                MODIFIED,
            )
        return await self.commit_update(
            rt,
            old,
            new,
            subresource=subresource,
            manager=manager,
            dry_run=dry_run,
            field_validation=field_validation,
            warnings=warnings if warnings is not None else [],
        )

    async def commit_update(
        self,
        rt: ResourceType,
        old: dict[str, Any],
        new: dict[str, Any],
        *,
        subresource: str,
        manager: str,
        dry_run: bool,
        field_validation: str,
        warnings: list[str],
        applied: bool = False,
    ) -> dict[str, Any]:
        old_meta = old["metadata"]
        if subresource == "status":
            merged = copy.deepcopy(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            if applied:  # keep the status applier's managedFields entry
                fields = new["metadata"].get("managedFields")
                if fields is None:
                    merged["metadata"].pop("managedFields", None)
                else:
                    merged["metadata"]["managedFields"] = fields
            new = merged
        elif subresource == "finalize" and rt.kind == "Namespace":
            merged = copy.deepcopy(old)
            merged["spec"] = {
                **(old.get("spec") or {}),
                "finalizers": (new.get("spec") or {}).get("finalizers") or [],
            }
            new = merged
        elif rt.status and "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        elif rt.status:
            new.pop("status", None)
        meta = new["metadata"]
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generateName",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if rt.namespaced:
            meta["namespace"] = old_meta.get("namespace", "")
        if old_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise invalid(rt.kind, rt.group, meta["name"], [_finalizer_error(sorted(added))])
        meta["generation"] = old_meta.get("generation", 1) + (1 if _spec_changed(old, new) else 0)
        new = await self.admission.admit(
            rt,
            "UPDATE",
            new,
            old,
            dry_run=dry_run,
            field_validation=field_validation,
            warnings=warnings,
            subresource=subresource,
        )
        current = self.store.get(rt.key, old_meta.get("namespace") or "", old_meta["name"])
        if current is None:
            raise not_found(rt.plural, rt.group, old_meta["name"])
        if current["metadata"]["resourceVersion"] != old_meta["resourceVersion"]:
            # Another write landed while admission ran (webhooks are awaited): never overwrite
            # it. Patches are retried on the fresh object; updates answer 409, as the real
            # server's guaranteed update does.
            raise StaleWrite(rt.plural, rt.group, old_meta["name"])
        if not applied:
            ssa.track_update(
                rt, old, new, manager or "unknown", subresource=subresource, now=_now_rfc3339(self)
            )
        meta = new["metadata"]
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if _same(old, new):
            return old  # a no-op write changes nothing, not even the resourceVersion
        if dry_run:
            return new
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The last finalizer is gone: stored and deleted in one persisted batch.
            self._after_delete(rt, self.store.put_and_remove(rt.key, new, old)[1])
            return new
        self.store.put(rt.key, new, old)
        self._after_write(rt, new, old)
        return new

    async def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str = "",
        manager: str = "",
        force: bool = False,
        dry_run: bool = False,
        field_validation: str = "Strict",
        warnings: list[str] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """A patch, retried on the fresh object when another write lands while admission
        runs (the real server retries patches the same way)."""
        for _ in range(PATCH_RETRIES):
            try:
                return await self._patch_once(
                    rt,
                    namespace,
                    name,
                    content_type,
                    body,
                    subresource=subresource,
                    manager=manager,
                    force=force,
                    dry_run=dry_run,
                    field_validation=field_validation,
                    warnings=warnings,
                )
            except StaleWrite:
                continue
        raise conflict(rt.plural, rt.group, name, MODIFIED)

    async def _patch_once(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str = "",
        manager: str = "",
        force: bool = False,
        dry_run: bool = False,
        field_validation: str = "Strict",
        warnings: list[str] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        warnings = warnings if warnings is not None else []
        ns = namespace if rt.namespaced else ""
        old = self.store.get(rt.key, ns, name)
        if content_type == APPLY:
            if not manager:
                raise bad_request("PATCH with apply requires a fieldManager")
            if not isinstance(body, dict):
                raise bad_request("an apply patch must be an object")
            metadata.check_apply_config(rt, body)
            config = copy.deepcopy(body)
            now = _now_rfc3339(self)
            if old is None:
                if subresource:
                    raise not_found(rt.plural, rt.group, name)
                created = ssa.apply(rt, None, config, manager, force=force, now=now)
                created.setdefault("metadata", {})["name"] = name
                obj, _ = await self.create(
                    rt,
                    namespace,
                    created,
                    manager=manager,
                    dry_run=dry_run,
                    field_validation=field_validation,
                    warnings=warnings,
                    applied=True,
                )
                return obj, True
            merged = ssa.apply(
                rt, old, config, manager, force=force, subresource=subresource, now=now
            )
            obj = await self.commit_update(
                rt,
                old,
                self._check_body(rt, merged, namespace, name),
                subresource=subresource,
                manager=manager,
                dry_run=dry_run,
                field_validation=field_validation,
                warnings=warnings,
                applied=True,
            )
            return obj, False
        if old is None:
            raise not_found(rt.plural, rt.group, name)
        current = copy.deepcopy(old)
        if content_type in (MERGE, "application/json"):
            patched = merge_patch(current, body)
        elif content_type == JSON:
            patched = json_patch(current, body)
        elif content_type == STRATEGIC:
            if not rt.builtin:
                raise unsupported_media_type(content_type)
            patched = strategic_merge_patch(current, body, rt.merge_keys)
        else:
            raise unsupported_media_type(content_type)
        if not isinstance(patched, dict):
            raise bad_request("the patch did not produce an object")
        patched = self._check_body(rt, patched, namespace, name)
        rv = patched["metadata"].get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise conflict(
                rt.plural,
                rt.group,
                name,
                MODIFIED,
            )
        obj = await self.commit_update(
            rt,
            old,
            patched,
            subresource=subresource,
            manager=manager,
            dry_run=dry_run,
            field_validation=field_validation,
            warnings=warnings,
        )
        return obj, False

    async def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        policy: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        old = self._get_or_404(rt, namespace, name)
        meta = old["metadata"]
        pre = preconditions or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, "
                f"UID in object meta: {meta.get('uid')}",
            )
        if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
            raise conflict(
                rt.plural, rt.group, name, "Precondition failed: resourceVersion mismatch"
            )
        await self.admission.admit_delete(rt, old, dry_run=dry_run)
        if dry_run:
            return served_copy(rt, old)
        policy = policy or ("Foreground" if rt.kind == "Namespace" else "Background")
        finalizers = list(meta.get("finalizers") or [])
        # The policy's finalizer replaces the other one: both are never set together.
        if policy == "Foreground" and rt.kind != "Namespace":
            finalizers = [f for f in finalizers if f != "orphan"]
            if "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
        if policy == "Orphan":
            finalizers = [f for f in finalizers if f != "foregroundDeletion"]
            if "orphan" not in finalizers:
                finalizers.append("orphan")
        if rt.kind == "Namespace" or finalizers:
            if meta.get("deletionTimestamp"):
                return served_copy(rt, old)
            new = copy.deepcopy(old)
            new["metadata"]["deletionTimestamp"] = _now_rfc3339(self)
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["metadata"]["finalizers"] = finalizers
            if rt.kind == "Namespace":
                new.setdefault("status", {})["phase"] = "Terminating"
            self.store.put(rt.key, new, old)
            self._after_write(rt, new, old)
            return served_copy(rt, new)
        self.remove(rt, old)
        return served_copy(rt, old)

    def remove(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        ev = self.store.remove(rt.key, obj)
        self._after_delete(rt, ev)

    def _after_write(
        self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            crd.on_crd_write(self, obj)
        if rt.key == ("", "namespaces") and old is None:
            self._default_service_account(obj["metadata"]["name"])
        self.gc.notice(rt, obj)

    def _default_service_account(self, namespace: str) -> None:
        """Every namespace has a ``default`` ServiceAccount, as the service-account
        controller of a cluster makes it (pods run as it unless they name another)."""
        if self.store.get(("", "serviceaccounts"), namespace, "default") is None:
            self.create_direct(
                "v1", "ServiceAccount", {"metadata": {"name": "default", "namespace": namespace}}
            )

    def _after_delete(self, rt: ResourceType, ev: Event) -> None:
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            crd.on_crd_delete(self, ev.obj)
        self.gc.deleted(rt, ev.obj)

    # --- pod logs ---------------------------------------------------------------------------
    def append_log(self, namespace: str, pod: str, container: str, text: str) -> None:
        """Feed a container's log (the executor plays the kubelet)."""
        key = (namespace, pod, container)
        self.pod_logs.setdefault(key, []).append(text)
        waiter = self._log_waiters.pop(key, None)
        if waiter is not None:
            waiter.set()

    async def _pod_log(
        self, request: web.Request, route: Route, query: dict[str, str]
    ) -> web.StreamResponse:
        pod = self._get_or_404(route.rt, route.namespace, route.name)
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        container = query.get("container") or (containers[0] if len(containers) == 1 else "")
        if not container:
            raise bad_request(
                f"a container name must be specified for pod {route.name}, "
                f"choose one of: {containers}"
            )
        key = (route.namespace, route.name, container)
        if not flag(query.get("follow")):
            text = "".join(self.pod_logs.get(key, []))
            tail = metadata.int_param(query, "tailLines", options="PodLogOptions")
            if tail:
                text = "".join(text.splitlines(keepends=True)[-tail:])
            return web.Response(text=text, content_type="text/plain")
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        sent = 0
        while not self._stopping.is_set():
            chunks = self.pod_logs.get(key, [])
            for chunk in chunks[sent:]:
                await resp.write(chunk.encode())
            sent = len(chunks)
            current = self.store.get(route.rt.key, route.namespace, route.name)
            phase = ((current or {}).get("status") or {}).get("phase")
            if current is None or phase in ("Succeeded", "Failed"):
                break
            waiter = self._log_waiters.setdefault(key, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.wait(), timeout=1.0)
        await resp.write_eof()
        return resp


def _spec_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    strip = ("metadata", "status", "apiVersion", "kind")
    return {k: v for k, v in old.items() if k not in strip} != {
        k: v for k, v in new.items() if k not in strip
    }


def _same(old: dict[str, Any], new: dict[str, Any]) -> bool:
    def norm(o: dict[str, Any]) -> dict[str, Any]:
        meta = {
            k: v for k, v in o["metadata"].items() if k not in ("resourceVersion", "managedFields")
        }
        fields = [
            {k: v for k, v in e.items() if k != "time"}
            for e in o["metadata"].get("managedFields") or []
        ]
        return {**o, "metadata": meta, "_fields": fields}

    return norm(old) == norm(new)


def _finalizer_error(added: list[str]) -> Any:
    from trainer.api.errors import FORBIDDEN, FieldError  # noqa: PLC0415

    return FieldError(
        "metadata.finalizers",
        FORBIDDEN,
        "no new finalizers can be added if the object is being deleted, found new finalizers "
        + json.dumps(added),
    )


def _manager_from_agent(agent: str) -> str:
    """Kubernetes defaults the field manager to the user agent's program name."""
    return agent.split("/", 1)[0] if agent else "unknown"


def _reason_for(code: int) -> str:
    return {
        400: "BadRequest",
        401: "Unauthorized",
        403: "Forbidden",
        404: "NotFound",
        409: "Conflict",
        410: "Expired",
        422: "Invalid",
        429: "TooManyRequests",
        500: "InternalError",
        503: "ServiceUnavailable",
        504: "Timeout",
    }.get(code, "Unknown")


def _json_or_empty(raw: bytes) -> Any:
    if not raw:
        return {}
    try:
        return load_json(raw, "body")
    except ValueError:
        raise bad_request("the request body is not valid JSON") from None


def _json(body: Any, *, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers = {}
    if warnings:
        headers["Warning"] = ", ".join(f'299 - "{w}"' for w in warnings)
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _status_response(err: APIError) -> web.Response:
    headers = {"Retry-After": "1"} if err.code == 429 else {}
    return web.Response(
        body=json.dumps(err.status()).encode(),
        status=err.code,
        content_type="application/json",
        headers=headers,
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
