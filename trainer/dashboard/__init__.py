"""``trainer dashboard``: a web page of the TrainJobs of a cluster, live (docs/dashboard.md).

Modules, bottom up:

- :mod:`trainer.dashboard.policy`: pure functions from API objects to what a page shows (a
  TrainJob's row, its steps, pods, events and timeline; a runtime's framework, policy and
  images; the Nodes page; the metric history). No I/O.
- :mod:`trainer.dashboard.watch`: watch caches (:mod:`trainer.kube.informer`) of TrainJobs,
  JobSets, Jobs, pods, Events and runtimes, the metric history each TrainJob reported while
  the dashboard watched, and subscriptions that tell a page which TrainJobs changed.
- :mod:`trainer.dashboard.auth`: the access token, sessions (a cookie and a key only the page
  holds, which is also the CSRF token; they expire), the ``Host`` check, as an ASGI
  middleware.
- :mod:`trainer.dashboard.views`, :mod:`trainer.dashboard.live`,
  :mod:`trainer.dashboard.actions`: page skeletons (Jinja2 templates, autoescaped) and the
  JSON the script draws them from, server-sent event streams and pod logs, and suspend /
  resume / delete.
- :mod:`trainer.dashboard.app` assembles the Starlette app; :mod:`trainer.dashboard.server`
  serves it with uvicorn, on a guarded listener (:mod:`trainer.listeners`), next to whatever
  else runs on the event loop (``trainer up``).
"""
