"""The optional dependencies of the data cache, imported only when a cache is served or read,
so the core install (the controller, ``trainer run`` without a cache) works without them."""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRA = "datacache"
INSTALL_HINT = (
    f"install the {EXTRA!r} extra: pip install 'kubeflow-trainer-py[{EXTRA}]' "
    "(pyarrow, grpcio, grpcio-health-checking)"
)


class MissingDependency(ImportError):
    """A package of the ``datacache`` extra is not installed; the message says how to get it."""


def require(module: str) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependency` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(
            f"the data cache needs {module.partition('.')[0]}, which is not installed "
            f"({exc}); {INSTALL_HINT}"
        ) from exc


def available() -> str | None:
    """None when every dependency imports, else the reason it does not."""
    try:
        for module in ("pyarrow.flight", "grpc", "grpc_health.v1.health_pb2"):
            require(module)
    except MissingDependency as exc:
        return str(exc)
    return None
