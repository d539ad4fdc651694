"""Suspend, resume and delete a TrainJob: ``POST /api/trainjobs/{ns}/{name}/{action}``.

Only when the dashboard was started with ``--allow-actions`` (403 otherwise); the page asks
for confirmation first, and the access middleware has already checked the session's CSRF token
(:mod:`trainer.dashboard.auth`). Each action is one API call made with the dashboard's
kubeconfig credentials, so RBAC and admission decide as for ``kubectl``: suspend and resume are
a merge patch of ``spec.suspend``, delete is a DELETE with background propagation (garbage
collection removes the JobSet and pods). The API server's refusal is passed on with its code
and message.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from trainer.dashboard.views import ctx_of
from trainer.kube.resources import TRAINJOBS
from trainer.kube.rest import APIError

ACTIONS = ("suspend", "resume", "delete")


async def act(request: Request) -> Response:
    ctx = ctx_of(request)
    namespace, name = request.path_params["namespace"], request.path_params["name"]
    action = request.path_params["action"]
    if not ctx.allow_actions:
        return JSONResponse(
            {"error": "actions are disabled: start the dashboard with --allow-actions"},
            status_code=403,
        )
    if action not in ACTIONS:
        return JSONResponse(
            {"error": f"action: {action!r} is not one of {', '.join(ACTIONS)}"}, status_code=404
        )
    kube = ctx.cache.kube
    try:
        if action == "delete":
            found = await kube.delete(TRAINJOBS, namespace, name)
        else:
            patch = {"spec": {"suspend": action == "suspend"}}
            await kube.patch(TRAINJOBS, namespace, name, patch)
            found = True
    except APIError as err:
        code = err.status if 400 <= err.status < 600 else 502
        return JSONResponse({"error": err.message or str(err)}, status_code=code)
    if not found:
        return JSONResponse({"error": f"TrainJob {namespace}/{name} not found"}, status_code=404)
    return JSONResponse({"ok": True, "action": action, "namespace": namespace, "name": name})
