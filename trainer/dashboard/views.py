"""The pages (Jinja2, autoescaped) and the JSON they are drawn from.

A page is a skeleton that holds nothing of the cluster: a browser navigation carries only the
session cookie, which another port of the same host can capture, so a page must be worth
nothing to whoever replays it (docs/dashboard.md, "Security"). ``static/dashboard.js`` fetches
the data from ``/api/`` with the session key (:mod:`trainer.dashboard.auth`), draws it with
``textContent`` and DOM calls only, and keeps it current from the event streams
(:mod:`trainer.dashboard.live`). Nothing a cluster holds is ever inserted as markup.
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
    """A skeleton page: the values come from the dashboard's options and the URL, never from
    the cluster."""
    html = ENV.get_template(template).render(allow_actions=ctx_of(request).allow_actions, **values)
    return HTMLResponse(html, status_code=status)


async def trainjobs_page(request: Request) -> Response:
    return page(request, "trainjobs.html", title="TrainJobs")


async def trainjob_page(request: Request) -> Response:
    """The page of one TrainJob, whether or not it exists (the script asks, with the key)."""
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    return page(
        request, "trainjob.html", title=f"{namespace}/{name}", namespace=namespace, name=name
    )


async def runtimes_page(request: Request) -> Response:
    return page(request, "runtimes.html", title="Runtimes")


async def nodes_page(request: Request) -> Response:
    return page(request, "nodes.html", title="Nodes")


async def info_json(request: Request) -> Response:
    """What the page's header says: the scope, the cluster, whether actions are on, the
    resources not shown and why, and ``waiting`` while the Trainer CRDs are not all served
    (:meth:`~trainer.dashboard.watch.cache.ClusterCache.status`; the streams send it again
    when it changes)."""
    ctx = ctx_of(request)
    return JSONResponse(
        {
            "scope": ctx.scope,
            "namespace": ctx.cache.namespace,
            "cluster": ctx.cluster,
            "allowActions": ctx.allow_actions,
            **ctx.cache.status(),
        }
    )


async def trainjobs_json(request: Request) -> Response:
    return JSONResponse(ctx_of(request).cache.rows())


async def trainjob_json(request: Request) -> Response:
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    cache = ctx_of(request).cache
    detail = cache.detail(namespace, name)
    if detail is None and not cache.trainjobs.served:
        # Not "not found": whether it exists is unknown until the TrainJob CRD is served.
        waiting = cache.waiting or ""
        return JSONResponse({"error": waiting, "waiting": waiting}, status_code=503)
    if detail is None:
        return JSONResponse({"error": f"TrainJob {namespace}/{name} not found"}, status_code=404)
    return JSONResponse(detail)


async def runtimes_json(request: Request) -> Response:
    rows = sorted(
        ctx_of(request).cache.runtime_rows(), key=lambda x: (x["kind"], x["namespace"], x["name"])
    )
    return JSONResponse(rows)


async def nodes_json(request: Request) -> Response:
    return JSONResponse(ctx_of(request).cache.nodes_view())


async def not_found(request: Request, _exc: Exception) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": "not found"}, status_code=404)
    return page(request, "missing.html", status=404, title="Not found", what=request.url.path)
