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
import contextlib
import json
import logging
import os
import secrets
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import yaml
from aiohttp import web

from trainer.api.safeload import Limits, load_json, load_yaml
from trainer.local.apiserver import authn, discovery, metadata, protobuf, table
from trainer.local.apiserver.authz import subject_access_review
from trainer.local.apiserver.core.storage import Storage
from trainer.local.apiserver.errors import (
    APIError,
    bad_request,
    internal,
    method_not_allowed,
    not_found,
    too_large,
)
from trainer.local.apiserver.hooks import RequestRecord
from trainer.local.apiserver.http.webhook_client import WebhookClient
from trainer.local.apiserver.patch import (
    APPLY,
)
from trainer.local.apiserver.resources import ResourceType, served, served_copy
from trainer.local.apiserver.selectors import flag
from trainer.local.apiserver.tls import ServingTLS
from trainer.local.apiserver.tokens import TokenIssuer, TokenRequestError
from trainer.local.apiserver.watch import serve_watch

log = logging.getLogger("trainer.apiserver")

DEFAULT_MAX_BODY = 3 * 1024 * 1024
TOKEN_REVIEWS = ("authentication.k8s.io", "tokenreviews")
ACCESS_REVIEWS = ("authorization.k8s.io", "subjectaccessreviews")
SELF_REVIEWS = ("authentication.k8s.io", "selfsubjectreviews")
SELF_ACCESS_REVIEWS = ("authorization.k8s.io", "selfsubjectaccessreviews")
RBAC_GROUP = "rbac.authorization.k8s.io"


@dataclass
class Route:
    rt: ResourceType
    namespace: str  # "" for cluster scope or all namespaces
    name: str
    subresource: str
    legacy_watch: bool = False


class APIServer(Storage):
    """The embedded API server: the storage core (:class:`Storage`) served over HTTPS.
    ``await start()`` binds 127.0.0.1 on ``port`` (0: any free)
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
        super().__init__(
            webhooks=WebhookClient(),
            history=history,
            state_file=state_file,
            reset_damaged_state=reset_damaged_state,
        )
        self.tls = ServingTLS()
        self.max_body = max_body
        self.tokens = TokenIssuer()
        self.authenticator = authn.Authenticator(
            self.token, self.tokens, self._lookup, lambda: self.hooks.clock.now().timestamp()
        )
        self.pod_logs: dict[tuple[str, str, str], list[str]] = {}
        self._log_waiters: dict[tuple[str, str, str], asyncio.Event] = {}
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()

    # --- lifecycle --------------------------------------------------------------------------
    async def start(self) -> str:
        app = web.Application(client_max_size=self.max_body)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner, self.host, self.port, ssl_context=self.tls.server_context()
        )
        await site.start()
        self.port = self._runner.addresses[0][1]
        self.start_background()
        log.info("local API server listening on %s", self.url)
        return self.url

    async def stop(self) -> None:
        self._stopping.set()
        await self.stop_background()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.close()

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
            obj = self.get_or_404(rt, route.namespace, route.name)
            return self._respond(request, rt, served(rt, obj))
        if verb == "create" and route.subresource == "log":
            # This server's extension for the local executor (it plays the kubelet): append
            # to a container's log, served back by GET .../log.
            self.get_or_404(rt, route.namespace, route.name)
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
            items = await self.delete_collection(
                rt, route.namespace, query, policy=policy, dry_run=dry_run
            )
            return _json(self.list_body(rt, [served_copy(rt, o) for o in items]))
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
            sa = self.get_or_404(route.rt, route.namespace, route.name)
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

    def _respond(
        self, request: web.Request, rt: ResourceType, body: dict[str, Any], *, is_list: bool = False
    ) -> web.Response:
        accept = request.headers.get("Accept", "")
        if "as=Table" in accept:
            include = request.query.get("includeObject", "Metadata")
            return _json(table.to_table(self, rt, body, is_list=is_list, include_object=include))
        return _json(body)

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
        pod = self.get_or_404(route.rt, route.namespace, route.name)
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
