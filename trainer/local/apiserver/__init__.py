"""The embedded Kubernetes API server (see :mod:`trainer.local.apiserver.server`)."""

from __future__ import annotations

from trainer.local.apiserver.server import APIServer

__all__ = ["APIServer"]
