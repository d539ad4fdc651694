"""Import kubernetes_asyncio without its ~1,700 generated API and model classes.

``import kubernetes_asyncio.client`` runs a package ``__init__`` that imports every typed API
class and every model, about 35 MB of a process, before anything is used. :mod:`trainer.kube`
needs only ``Configuration``, ``ApiClient`` (for ``call_api`` with ``_preload_content=False``,
which never deserialises into models) and the kubeconfig loaders. :func:`import_lean` makes the
packages ``kubernetes_asyncio``, ``kubernetes_asyncio.client`` and its ``models`` empty
namespace modules (their submodules still load from the installed files), then imports just
those pieces. It is for a process that uses only :class:`trainer.kube.rest.Kube` (the
dashboard's, docs/dashboard.md "Footprint"): a typed API (``client.CoreV1Api``) is not
available there. It must run before anything imports kubernetes_asyncio; if anything
differs from what it expects (another version's layout) it undoes itself and returns False,
leaving the normal import to happen.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

PACKAGES = ("kubernetes_asyncio", "kubernetes_asyncio.client", "kubernetes_asyncio.client.models")


def import_lean() -> bool:
    """Install the lean kubernetes_asyncio; True when it is in place."""
    if any(name.startswith("kubernetes_asyncio") for name in sys.modules):
        return False  # too late: the full package is (being) imported
    spec = importlib.util.find_spec("kubernetes_asyncio")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = next(iter(spec.submodule_search_locations))
    stubs = {}
    for name in PACKAGES:
        module = types.ModuleType(name)
        module.__path__ = [os.path.join(root, *name.split(".")[1:])]
        stubs[name] = module
    sys.modules.update(stubs)
    try:
        package, client = stubs["kubernetes_asyncio"], stubs["kubernetes_asyncio.client"]
        configuration = importlib.import_module("kubernetes_asyncio.client.configuration")
        api_client = importlib.import_module("kubernetes_asyncio.client.api_client")
        client.Configuration = configuration.Configuration  # type: ignore[attr-defined]
        client.ApiClient = api_client.ApiClient  # type: ignore[attr-defined]
        package.client = client  # type: ignore[attr-defined]
        package.config = importlib.import_module("kubernetes_asyncio.config")  # type: ignore[attr-defined]
    except Exception:
        for name in [m for m in sys.modules if m.startswith("kubernetes_asyncio")]:
            del sys.modules[name]
        return False
    return True
