"""The dashboard's web app: routes, static files, the access middleware.

Built on Starlette, the toolkit FastAPI is made of, rather than FastAPI itself: the dashboard
declares no request models and has no OpenAPI to publish, and FastAPI's import (with its
pydantic schemas) costs about 13 MB of a process that must hold 1,000 TrainJobs in under
100 MB (docs/dashboard.md, "Footprint").
"""

from __future__ import annotations

from importlib import resources

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from trainer.dashboard import actions, live, views
from trainer.dashboard.auth import AccessMiddleware
from trainer.dashboard.context import DashboardContext


def build_app(ctx: DashboardContext) -> AccessMiddleware:
    static = str(resources.files("trainer.dashboard") / "static")
    app = Starlette(
        routes=[
            Route("/", views.trainjobs_page),
            Route("/trainjobs/{namespace}/{name}", views.trainjob_page),
            Route("/runtimes", views.runtimes_page),
            Route("/nodes", views.nodes_page),
            Route("/api/info", views.info_json),
            Route("/api/trainjobs", views.trainjobs_json),
            Route("/api/trainjobs/{namespace}/{name}", views.trainjob_json),
            Route("/api/trainjobs/{namespace}/{name}/{action}", actions.act, methods=["POST"]),
            Route("/api/runtimes", views.runtimes_json),
            Route("/api/nodes", views.nodes_json),
            Route("/api/stream", live.list_stream),
            Route("/api/stream/nodes", live.nodes_stream),
            Route("/api/stream/{namespace}/{name}", live.detail_stream),
            Route("/api/logs/{namespace}/{pod}", live.pod_log),
            Mount("/static", StaticFiles(directory=static), name="static"),
        ],
        exception_handlers={404: views.not_found},
    )
    app.state.ctx = ctx
    return AccessMiddleware(app, ctx.access)
