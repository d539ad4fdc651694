"""The TrainJob status server (docs/status-server.md; feature gate ``TrainJobStatus``).

Training code reports progress to ``POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/
trainjobs/{name}/status`` with a body ``{"trainerStatus": {...}}`` (at most 64 KiB) and its
projected service-account token as ``Authorization: Bearer <token>``. The server checks the
token, validates the payload against the TrainerStatus schema and server-side-applies it to the
TrainJob's ``/status`` with field manager ``trainer-status`` (force), so each post replaces the
previous trainerStatus. Answers are ``metav1.Status`` JSON, except a 200 that echoes the request.

Authentication (our choice; upstream verifies the JWT itself by OIDC discovery against the
issuer of its own token): a ``TokenReview`` (authentication.k8s.io/v1) with
``spec.audiences = [trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status]``.
That works with any issuer (no discovery endpoint, no JWKS), and the API server applies its own
revocation rules (a token bound to a deleted pod fails). The review must say authenticated,
echo the audience, and name a service account of namespace ``{ns}``
(``system:serviceaccount:<ns>:<sa>``). Positive reviews are cached for a few seconds (never
past the token's ``exp``), keyed by a SHA-256 of token and audience; the token itself is never
stored or logged. Before any review, tokens that are not shaped like a service-account token
for the audience and namespace are refused, and refused tokens are remembered for a minute
(:mod:`trainer.statusserver.auth`).

Every API call (TokenReview, apply) goes through the server's own token bucket
(``statusServer.qps``/``burst``), apart from the controller's, shared fairly by the clients
(:mod:`trainer.statusserver.fairlimit`, :mod:`trainer.statusserver.peers`): one client's flood of
bad tokens does not hold up another's reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import ssl
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from trainer.api import constants as c
from trainer.api.crds import schema_for_kind
from trainer.kube import resources as r
from trainer.kube.authn import TokenReviewer, bearer_token
from trainer.kube.rest import APIError, Kube
from trainer.listeners.https_app import HttpsAppServer
from trainer.machinery.errors import FORBIDDEN, INVALID, FieldError, format_errors
from trainer.machinery.openapi.defaults import prune
from trainer.machinery.openapi.validate import validate
from trainer.machinery.sockets import bind_socket
from trainer.machinery.status import failure, reason_for
from trainer.statusserver.auth import Refused, StatusAuthenticator
from trainer.statusserver.fairlimit import FairLimiter
from trainer.statusserver.peers import Peer

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
ROUTE = re.compile(
    r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/(?P<ns>[^/]+)/trainjobs/(?P<name>[^/]+)"
    r"/status$"
)


def audience(namespace: str, name: str) -> str:
    return f"{c.GROUP}/{c.VERSION}/namespaces/{namespace}/trainjobs/{name}/status"


def status_body(code: int, message: str, reason: str = "") -> dict[str, Any]:
    """A ``metav1.Status`` failure."""
    return failure(code, reason or reason_for(code, ""), message)


def _json(body: Any, code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":")),
        status_code=code,
        media_type="application/json",
        headers=headers,
    )


def _status(code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return _json(status_body(code, message), code, headers)


# --- validation ----------------------------------------------------------------------------------


def trainer_status_schema() -> dict[str, Any]:
    schema: dict[str, Any] = schema_for_kind(c.KIND_TRAINJOB)["properties"]["status"]["properties"][
        "trainerStatus"
    ]
    return schema


def validate_trainer_status(value: Any) -> list[FieldError]:
    """Errors of a trainerStatus against the CRD schema (unknown fields included: the API
    server would drop them silently, we say so)."""
    schema = trainer_status_schema()
    path = "status.trainerStatus"
    if not isinstance(value, dict):
        return [FieldError(path, INVALID, "must be an object", value)]
    _, removed = prune(schema, value, resource_root=False)
    errors = [FieldError(f"{path}.{p}", FORBIDDEN, "unknown field") for p in removed]
    # Named from ``status`` in messages, as the API server names them in a status update.
    return errors + validate(schema, value, path=path, root="status")


# --- the app -------------------------------------------------------------------------------------


class StatusService:
    """What a post does: authenticate, read, validate, apply. ``reviewer`` has no limiter of
    its own: reviews and applies share ``limiter``, fairly by client."""

    def __init__(self, kube: Kube, reviewer: TokenReviewer, limiter: FairLimiter) -> None:
        self.kube = kube
        self.limiter = limiter
        self.auth = StatusAuthenticator(reviewer, limiter)

    async def handle(self, request: Request) -> Response:
        match = ROUTE.match(request.url.path)
        if match is None:
            return _status(404, "Not found")
        if request.method != "POST":
            return _json(status_body(405, "Method not allowed"), 405, headers={"Allow": "POST"})
        namespace, name = match["ns"], match["name"]
        token = bearer_token(request.headers.getlist("authorization"))
        if token is None:
            return _status(403, "Forbidden")
        client = Peer(request.scope.get("client"), request.scope.get("server"))
        try:
            await self.auth.authenticate(token, audience(namespace, name), namespace, client)
        except Refused as refused:
            retry = {"Retry-After": str(refused.retry_after)} if refused.retry_after else None
            return _status(refused.code, refused.message, retry)
        except APIError as exc:
            log.error("status server: TokenReview failed: %s", exc.message)
            return _status(500, "Internal error")

        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            return _status(413, "Payload too large")
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > MAX_BODY_BYTES:
                return _status(413, "Payload too large")
        try:
            body = json.loads(raw)
        except ValueError:
            return _status(422, "Invalid payload")
        if not isinstance(body, dict):
            return _status(422, "Invalid payload")
        trainer_status = body.get("trainerStatus")
        if trainer_status is None:
            return _json(body)  # nothing to report: no write
        errors = validate_trainer_status(trainer_status)
        if errors:
            return _status(422, f'TrainJob.{c.GROUP} "{name}" is invalid: {format_errors(errors)}')
        # An authenticated report: it waits in its client's queue, whatever that queue holds.
        await self.limiter.acquire(await client.key(), limit_waiting=False)
        try:
            await self.kube.apply(
                {
                    "apiVersion": c.API_VERSION,
                    "kind": c.KIND_TRAINJOB,
                    "metadata": {"name": name, "namespace": namespace},
                    "status": {"trainerStatus": trainer_status},
                },
                c.FIELD_MANAGER_STATUS_SERVER,
                force=True,
                subresource="status",
                gvr=r.TRAINJOBS,
            )
        except APIError as exc:
            if exc.is_not_found:
                return _status(404, "Train job not found")
            if exc.status == 422:
                return _status(422, exc.message)
            log.error("status server: applying %s/%s failed: %s", namespace, name, exc.message)
            return _status(500, "Internal error")
        log.info("status server: trainerStatus of %s/%s updated", namespace, name)
        return _json(body)


def create_status_app(service: StatusService) -> Starlette:
    """The status server's app: a Starlette app (no FastAPI: it routes every path to one
    handler and needs no validation of parameters; docs/design.md, "Web stacks")."""

    async def handle(request: Request) -> Response:
        try:
            return await service.handle(request)
        except Exception:  # the server answers, whatever went wrong
            log.exception("status server: internal error on %s", request.url.path)
            return _status(500, "Internal error")

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", handle, methods=methods)])


# --- serving -------------------------------------------------------------------------------------


@dataclass
class StatusServerOptions:
    host: str = ""
    port: int = c.DEFAULT_STATUS_SERVER_PORT
    qps: float = 5.0
    burst: int = 10


@dataclass
class RunningStatusServer:
    host: str
    port: int


async def run_status_server(
    kube: Kube,
    options: StatusServerOptions,
    tls: ssl.SSLContext,
    stop: asyncio.Event,
    started: asyncio.Future[RunningStatusServer] | None = None,
) -> None:
    """Serve HTTPS on ``tls`` (the webhook's context: same certificate, same reloads) until
    ``stop`` is set; ``started`` resolves once connections are accepted."""
    limiter = FairLimiter(options.qps, options.burst)
    service = StatusService(kube, TokenReviewer(kube), limiter)
    host = options.host or "0.0.0.0"
    server = HttpsAppServer(
        create_status_app(service), host, options.port, tls, sock=bind_socket(host, options.port)
    )
    serving = asyncio.create_task(server.serve(), name="status-server")
    try:
        ready = asyncio.create_task(server.ready.wait())
        await asyncio.wait({ready, serving}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            ready.cancel()
            await serving
            raise RuntimeError("the status server stopped before it was ready")
        log.info("status server serving on port %d", server.port)
        if started is not None and not started.done():
            started.set_result(RunningStatusServer(host, server.port))
        await stop.wait()
    finally:
        server.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


async def tls_dial(host: str, port: int, timeout: float = 5.0) -> None:
    """The probe: complete a TLS handshake with the status server (its certificate is not
    checked: the probe asks "is it serving TLS", as upstream's dial does)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    dial_host = "127.0.0.1" if host in ("", "0.0.0.0") else host
    async with asyncio.timeout(timeout):
        _, writer = await asyncio.open_connection(dial_host, port, ssl=ctx)
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
