"""Reading the user's kubeconfig safely before kubernetes_asyncio does.

kubernetes_asyncio reads kubeconfigs with ``yaml.safe_load`` and indexes into them without
checks, so a hostile or damaged file (an alias bomb, 50,000 nested lists, ``clusters: 5``)
ends in a hang, a ``RecursionError`` or a ``TypeError``. Every file is first read with
:mod:`trainer.machinery.safeload` (UTF-8, 4 MiB, bounded depth and aliases) and its shape checked;
anything wrong is one :class:`KubeconfigError` line naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainer.machinery.safeload import CONFIG_LIMITS, InputError, load_yaml, read_bytes

SECTIONS = {"clusters": "cluster", "contexts": "context", "users": "user"}


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used; the message names the file."""


def default_path() -> Path:
    return Path.home() / ".kube" / "config"


def _shape(data: Any, source: str) -> None:
    def fail(message: str) -> KubeconfigError:
        return KubeconfigError(f"{source}: not a kubeconfig: {message}")

    if data is None:
        raise fail("the file is empty")
    if not isinstance(data, dict):
        raise fail("the file must hold a mapping (apiVersion: v1, kind: Config)")
    for section, inner in SECTIONS.items():
        items = data.get(section)
        if items is None:
            continue
        if not isinstance(items, list):
            raise fail(f"{section} must be a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise fail(f"{section}[{i}] must be a mapping with a string name")
            if item.get(inner) is not None and not isinstance(item[inner], dict):
                raise fail(f"{section}[{i}].{inner} must be a mapping")
    current = data.get("current-context")
    if current is not None and not isinstance(current, str):
        raise fail("current-context must be a string")


def check_kubeconfig(paths: str) -> None:
    """Read and check every file of a kubeconfig path list (``$KUBECONFIG`` syntax); files
    that do not exist are skipped as kubectl skips them, unless none exists."""
    found = False
    for path in (os.path.expanduser(p) for p in paths.split(os.pathsep) if p):
        if not os.path.lexists(path):
            continue
        found = True
        try:
            data = load_yaml(read_bytes(path, CONFIG_LIMITS), path, CONFIG_LIMITS)
        except InputError as exc:
            raise KubeconfigError(f"kubeconfig {exc}") from None
        _shape(data, f"kubeconfig {path}")
    if not found:
        raise KubeconfigError(f"kubeconfig {paths}: cannot read: No such file or directory")


def context_namespace(paths: str, context: str | None = None) -> str | None:
    """The namespace of ``context`` (default: the current context) in a kubeconfig path
    list, merged as kubectl merges it (the first file that sets ``current-context`` and the
    first definition of a context win); None when the context sets none. The files must
    have passed :func:`check_kubeconfig`."""
    docs: list[dict[str, Any]] = []
    for path in (os.path.expanduser(p) for p in paths.split(os.pathsep) if p):
        if os.path.lexists(path):
            data = load_yaml(read_bytes(path, CONFIG_LIMITS), path, CONFIG_LIMITS)
            if isinstance(data, dict):
                docs.append(data)
    name = context or next((d["current-context"] for d in docs if d.get("current-context")), None)
    for doc in docs:
        for item in doc.get("contexts") or []:
            if item.get("name") == name:
                namespace = (item.get("context") or {}).get("namespace")
                return str(namespace) if namespace else None
    return None
