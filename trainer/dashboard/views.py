"""The pages (Jinja2, autoescaped) and their JSON twins.

A page is a skeleton plus its data as JSON in a ``<script type="application/json">`` element
(Jinja2's ``tojson`` escapes ``<``, ``>``, ``&`` and quotes, so data cannot end the element);
``static/dashboard.js`` draws the data with ``textContent`` and DOM calls only, then keeps it
current from the event stream (:mod:`trainer.dashboard.live`). The Runtimes page is drawn on
the server, each value autoescaped. Nothing a cluster holds is ever inserted as markup.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from trainer.dashboard.context import DashboardContext

ENV = Environment(
    loader=PackageLoader("trainer.dashboard", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def ctx_of(request: Request) -> DashboardContext:
    ctx: DashboardContext = request.app.state.ctx
    return ctx


def page(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    ctx = ctx_of(request)
    html = ENV.get_template(template).render(
        csrf=request.scope.get("state", {}).get("csrf", ""),
        allow_actions=ctx.allow_actions,
        scope=ctx.scope,
        cluster=ctx.cluster,
        unavailable=ctx.cache.unavailable,
        **values,
    )
    return HTMLResponse(html, status_code=status)


async def trainjobs_page(request: Request) -> Response:
    ctx = ctx_of(request)
    data = {
        "rows": ctx.cache.rows(),
        "allowActions": ctx.allow_actions,
        "namespace": ctx.cache.namespace,
    }
    return page(request, "trainjobs.html", data=data, title="TrainJobs")


def _not_found(request: Request, namespace: str, name: str) -> HTMLResponse:
    return page(
        request,
        "missing.html",
        status=404,
        title="Not found",
        what=f"TrainJob {namespace}/{name}",
    )


async def trainjob_page(request: Request) -> Response:
    ctx = ctx_of(request)
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    detail = ctx.cache.detail(namespace, name)
    if detail is None:
        return _not_found(request, namespace, name)
    data = {"detail": detail, "allowActions": ctx.allow_actions}
    return page(request, "trainjob.html", data=data, title=f"{namespace}/{name}", job=detail["row"])


async def runtimes_page(request: Request) -> Response:
    rows = sorted(
        ctx_of(request).cache.runtime_rows(), key=lambda x: (x["kind"], x["namespace"], x["name"])
    )
    return page(request, "runtimes.html", runtimes=rows, title="Runtimes")


async def trainjobs_json(request: Request) -> Response:
    return JSONResponse(ctx_of(request).cache.rows())


async def trainjob_json(request: Request) -> Response:
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    detail = ctx_of(request).cache.detail(namespace, name)
    if detail is None:
        return JSONResponse({"error": f"TrainJob {namespace}/{name} not found"}, status_code=404)
    return JSONResponse(detail)


async def runtimes_json(request: Request) -> Response:
    return JSONResponse(ctx_of(request).cache.runtime_rows())


async def not_found(request: Request, _exc: Exception) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": "not found"}, status_code=404)
    return page(request, "missing.html", status=404, title="Not found", what=request.url.path)
