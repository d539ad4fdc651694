"""The embedded Kubernetes API server: an HTTP layer (:mod:`trainer.local.apiserver.http`,
:class:`APIServer`) above a storage core that imports nothing of HTTP
(:mod:`trainer.local.apiserver.core`); the other modules here are shared by both."""

from __future__ import annotations

from trainer.local.apiserver.http.server import APIServer

__all__ = ["APIServer"]
