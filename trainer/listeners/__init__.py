"""Every HTTP listener of the project (the API server, the webhook, the status server, metrics
and health probes, the dashboard) accepts connections through :mod:`.guard`: a cap on the
connections each one holds and a deadline for a connection's first request head, so that
idle sockets from someone else cannot use up the process's file descriptors
(docs/local-plane.md, "Listeners under abuse").

- :mod:`trainer.listeners.guard`: the limits, the descriptor limit, the accept loop
  (standard library only).
- :mod:`trainer.listeners.uvicorn_server`: uvicorn's server on a guarded listener (the webhook,
  the status server, the dashboard).
- :mod:`trainer.listeners.https_app`: an ASGI app over HTTPS on a reloadable TLS context (the
  webhook, the status server).
- :mod:`trainer.listeners.aiohttp_site`: an aiohttp site on a guarded listener (the local API
  server, metrics and probes).
"""
