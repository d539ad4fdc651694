"""A minimal list+watch cache over the local API server, calling a handler on every change."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from trainer.local.executor.client import ClientError, LocalClient

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], None]


class Cache:
    def __init__(self, client: LocalClient, api_version: str, plural: str) -> None:
        self.client = client
        self.api_version = api_version
        self.plural = plural
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.handlers: list[Handler] = []
        self.synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def all(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [o for (ns, _), o in self.objects.items() if namespace is None or ns == namespace]

    def owned_by(self, uid: str) -> list[dict[str, Any]]:
        return [
            o
            for o in self.objects.values()
            if any(
                r.get("uid") == uid and r.get("controller")
                for r in (o.get("metadata") or {}).get("ownerReferences") or []
            )
        ]

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"cache-{self.plural}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _key(self, obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return (meta.get("namespace") or "", meta.get("name") or "")

    def _emit(self, event: str, obj: dict[str, Any]) -> None:
        for handler in self.handlers:
            try:
                handler(event, obj)
            except Exception:
                log.exception("%s handler failed", self.plural)

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                items, rv = await self.client.list(self.api_version, self.plural)
                fresh = {self._key(o): o for o in items}
                for key, old in list(self.objects.items()):
                    if key not in fresh:
                        del self.objects[key]
                        self._emit("DELETED", old)
                for key, obj in fresh.items():
                    self.objects[key] = obj
                    self._emit("MODIFIED", obj)
                self.synced.set()
                delay = 0.1
                async for event in self.client.watch(self.api_version, self.plural, rv):
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "BOOKMARK":
                        continue
                    if kind == "ERROR":
                        break
                    key = self._key(obj)
                    if kind == "DELETED":
                        self.objects.pop(key, None)
                    else:
                        self.objects[key] = obj
                    self._emit(str(kind), obj)
            except asyncio.CancelledError:
                raise
            except (ClientError, OSError, ValueError) as exc:
                log.debug("watch of %s ended: %s", self.plural, exc)
            except Exception:
                log.exception("watch of %s failed", self.plural)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
