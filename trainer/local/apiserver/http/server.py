"""An in-memory Kubernetes API server speaking the real REST protocol over HTTPS on loopback.

It serves the built-in kinds this project needs and every CRD registered through the
apiextensions API, with real semantics: resourceVersions and optimistic concurrency,
generation, status subresources, label/field selectors and paging, merge / JSON / strategic
merge patches and server-side apply, finalizers and ownerReference garbage collection,
namespace lifecycle, watches with history, bookmarks and 410, dry runs, and admission
webhooks. Test hooks (``APIServer.storage.hooks``) expose the request log, fault injection and
the clock; ``APIServer.storage.objects`` reads stored objects directly. It serves HTTPS with its
own CA and requires a bearer token (:mod:`.authn`, :mod:`.tls`): :meth:`APIServer.kubeconfig`
carries both to clients.

Layers: :class:`APIServer` holds the storage core (:attr:`APIServer.storage`, a
:class:`~..core.storage.Storage`: every object rule) and serves it over HTTP. A request goes
:meth:`APIServer._handle` (Host check, bearer token, RBAC, media type, fault injection, the
request log) -> :func:`.routing.route` and :func:`.routing.verb` ->
:func:`.handlers.handler_for` (the table of verb + subresource) -> one handler, which calls the
core and encodes its answer (:mod:`.responses`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import ssl
import tempfile
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from trainer.listeners.aiohttp_site import GuardedSite
from trainer.local.apiserver.auth import authn
from trainer.local.apiserver.auth.tls import ServingTLS
from trainer.local.apiserver.auth.tokens import TokenIssuer
from trainer.local.apiserver.core.storage import Storage
from trainer.local.apiserver.errors import APIError, internal, method_not_allowed, too_large
from trainer.local.apiserver.hooks import RequestRecord
from trainer.local.apiserver.http import discovery, handlers, routing
from trainer.local.apiserver.http.logs import PodLogs
from trainer.local.apiserver.http.responses import json_response, status_response
from trainer.local.apiserver.http.routing import Route
from trainer.local.apiserver.http.webhook_client import WebhookClient
from trainer.machinery import yamlout
from trainer.machinery.sockets import bind_socket
from trainer.machinery.status import reason_for

log = logging.getLogger("trainer.apiserver")

DEFAULT_MAX_BODY = 3 * 1024 * 1024
RBAC_GROUP = handlers.RBAC_GROUP


class APIServer:
    """The embedded API server: its storage core (:attr:`storage`) served over HTTPS.
    ``await start()`` binds 127.0.0.1 on ``port`` (0: any free) and serves HTTPS. ``token``
    is the administrator's bearer token (random when not given); clients get it and the CA
    from :meth:`kubeconfig`, or from :meth:`client_ssl_context` and :meth:`auth_headers`."""

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
        self._webhooks = WebhookClient()
        self.storage = Storage(
            webhooks=self._webhooks,
            history=history,
            state_file=state_file,
            reset_damaged_state=reset_damaged_state,
        )
        self.tls = ServingTLS()
        self.max_body = max_body
        self.tokens = TokenIssuer()
        self.authenticator = authn.Authenticator(
            self.token,
            self.tokens,
            self._lookup,
            lambda: self.storage.hooks.clock.now().timestamp(),
        )
        self.logs = PodLogs(self.storage.store)
        self._runner: web.AppRunner | None = None

    # --- lifecycle --------------------------------------------------------------------------
    async def start(self) -> str:
        app = web.Application(client_max_size=self.max_body)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        # Guarded: a connection cap and a deadline for the first request head
        # (docs/local-plane.md, "Listeners under abuse").
        site = GuardedSite(
            self._runner,
            bind_socket(self.host, self.port),
            name="API server",
            ssl_context=self.tls.server_context(),
        )
        await site.start()
        self.port = self._runner.addresses[0][1]
        self.storage.start_background()
        log.info("local API server listening on %s", self.url)
        return self.url

    def attach_pods(self) -> None:
        """A plane that runs pods: publish ConfigMap ``kube-root-ca.crt`` in every namespace
        for the pods' in-cluster clients, as a cluster's controller manager does (an API
        server alone runs no pods and has none)."""
        self.storage.publish_root_ca(self.tls.ca_pem.decode())

    async def stop(self) -> None:
        self.logs.close()
        await self.storage.stop_background()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self.storage.close()

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
                fh.write(yamlout.dump(self.kubeconfig(**kw)))
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
            route = routing.route(self.storage.registry, request.path)
            if route is None:
                if user is not None:
                    attrs = authn.Attributes(request.method.lower(), path=request.path)
                    authn.authorize(user, attrs, self._rbac)
                resp = await self._non_resource(request)
                code = resp.status
                return resp
            query = {
                k: v[-1] for k, v in parse_qs(request.query_string, keep_blank_values=True).items()
            }
            verb = routing.verb(request.method, route, query)
            group, ns, name = route.rt.group, route.namespace, route.name
            resource = route.rt.plural + (f"/{route.subresource}" if route.subresource else "")
            manager = query.get("fieldManager", "")
            self._check_request(request, user, route, verb)
            fault = self.storage.hooks.fault_for(verb, resource)
            if fault is not None:
                err = APIError(fault.code, reason_for(fault.code), fault.message)
                code = fault.code
                return status_response(err)
            resp = await self._dispatch(request, route, verb, query, user)
            code = resp.status
            return resp
        except APIError as err:
            code = err.code
            resp = status_response(err)
            if code == 401:
                # A client without a valid token keeps no keep-alive socket: it must come back
                # through the listener's cap and request-head deadline (docs/local-plane.md,
                # "Listeners under abuse").
                resp.force_close()
            return resp
        except web.HTTPRequestEntityTooLarge:
            code = 413
            return status_response(too_large(self.max_body))
        except (ConnectionResetError, asyncio.CancelledError):
            code = 499
            raise
        except Exception as exc:  # the server never drops a request on a bug
            log.exception("internal error serving %s %s", request.method, request.path)
            code = 500
            return status_response(internal(f"{type(exc).__name__}: {exc}"))
        finally:
            self.storage.hooks.record(
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
        return self.storage.store.items((RBAC_GROUP, plural))

    def _lookup(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.storage.store.get(("", plural), namespace, name)

    async def _non_resource(self, request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            raise method_not_allowed(f"{request.method} is not allowed on {request.path}")
        body = discovery.non_resource(self.storage.registry, f"{self.host}:{self.port}", request)
        if body is None:
            raise APIError(404, "NotFound", "the server could not find the requested resource")
        if isinstance(body, web.StreamResponse):
            return body
        return json_response(body)

    async def _dispatch(
        self,
        request: web.Request,
        route: Route,
        verb: str,
        query: dict[str, str],
        user: authn.User | None,
    ) -> web.StreamResponse:
        if verb not in route.rt.verbs or (
            route.subresource in routing.CREATE_ONLY and verb != "create"
        ):
            raise method_not_allowed(
                f"the server does not allow this method on the requested resource ({verb})"
            )
        handler = handlers.handler_for(route, verb)
        if handler is None:
            raise method_not_allowed(f"{request.method} is not supported")
        call = handlers.Call(
            self.storage, self.tokens, self.logs, self.max_body, request, route, verb, query, user
        )
        return await handler(call)

    # --- pod logs ---------------------------------------------------------------------------
    def append_log(self, namespace: str, pod: str, container: str, text: str) -> None:
        """Feed a container's log (the executor plays the kubelet)."""
        self.logs.append(namespace, pod, container, text)
