"""``trainer dashboard``: a web page of the TrainJobs of a cluster, live (docs/dashboard.md).

Modules, bottom up:

- :mod:`trainer.dashboard.summary`, :mod:`trainer.dashboard.runtimes`: pure functions from API
  objects to what a page shows (a TrainJob's row, its steps, pods, events and timeline; a
  runtime's framework, policy and images). No I/O.
- :mod:`trainer.dashboard.watch`: watch caches (:mod:`trainer.kube.informer`) of TrainJobs,
  JobSets, Jobs, pods, Events and runtimes, the metric history each TrainJob reported while
  the dashboard watched, and subscriptions that tell a page which TrainJobs changed.
- :mod:`trainer.dashboard.auth`: the access token, session cookies, the ``Host`` check and CSRF
  tokens, as an ASGI middleware.
- :mod:`trainer.dashboard.views`, :mod:`trainer.dashboard.live`,
  :mod:`trainer.dashboard.actions`: pages (Jinja2 templates, autoescaped), server-sent event
  streams and pod logs, and suspend / resume / delete.
- :mod:`trainer.dashboard.app` assembles the Starlette app; :mod:`trainer.dashboard.server`
  serves it with uvicorn next to whatever else runs on the event loop (``trainer up``).
"""
