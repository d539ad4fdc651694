"""The TrainJob status server (docs/status-server.md; feature gate ``TrainJobStatus``): training
pods report their progress to it, and it applies the report to the TrainJob's status.

- :mod:`trainer.statusserver.server`: the ASGI app, its checks and the apply.
- :mod:`trainer.statusserver.auth`: who may report (token prechecks, TokenReviews, caches).
- :mod:`trainer.statusserver.fairlimit`: the API budget shared fairly by the clients.
- :mod:`trainer.statusserver.peers`: who a client is (its address, or its user on loopback).
"""
