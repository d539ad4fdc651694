"""OpenAPI documents describing the served resources, for kubectl.

kubectl 1.32 reads OpenAPI v3 (``/openapi/v3`` and one document per group/version):

- ``kubectl apply``/``create``/``replace`` look in the group/version document for the PATCH
  operation of the object's kind (by its ``x-kubernetes-group-version-kind`` extension) and
  for a ``fieldValidation`` query parameter on it; when present they let the server validate
  (``?fieldValidation=Strict``) instead of validating on the client. The PATCH request body's
  content types tell kubectl which patch types the kind accepts: custom resources list no
  strategic merge patch (the server answers 415), and neither do the built-in kinds here,
  whose schemas are too loose to compute one, so kubectl computes strategic merge patches for
  them from its compiled-in types, as it does when a server publishes no OpenAPI;
- ``kubectl explain`` finds the kind's schema in ``components.schemas`` by the same extension
  and walks ``properties``, ``items`` and ``allOf``/``$ref``.

Custom resources are published with their CRD version's ``openAPIV3Schema`` (``metadata``
replaced by a reference to ObjectMeta, as kube-apiserver does); built-in kinds with a
permissive schema (an object that keeps unknown fields, with ``apiVersion``, ``kind`` and
``metadata``). The index lists each document under a URL with the SHA-512 of its content, so
clients refetch exactly when a CRD changes what is served. Documents are cached until the
registry serves different resource types.

``/openapi/v2`` is the same content in Swagger 2.0 (CRD schemas converted as kube-apiserver
converts them for v2, see :func:`to_v2_schema`), as JSON or, when asked as kubectl asks, as the
gnostic ``openapi_v2.Document`` protobuf. kubectl validates on the client against v2 whenever
the server-side check does not apply: ``kind: List`` manifests, and kinds the server does not
serve (which must fail as "no matches for kind", not as a validation error); ``kubectl explain
--output=plaintext-openapiv2`` reads it too.

Modules: this one serves the documents and caches them; :mod:`.schemas` (meta types, each
kind's schema, the v2 conversion), :mod:`.paths` (operations and documents), :mod:`.proto`
(the v2 protobuf encoding), :mod:`.common` (shared names).
"""

from __future__ import annotations

import hashlib
import json
import weakref
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from trainer.local.apiserver.http.openapi.common import (
    PROTOBUF_V2,
    PROTOBUF_V2_RESPONSE,
    PROTOBUF_V2_TYPE,
)
from trainer.local.apiserver.http.openapi.paths import group_version_document, swagger_document
from trainer.local.apiserver.http.openapi.proto import swagger_protobuf
from trainer.local.apiserver.http.openapi.schemas import gv_path
from trainer.local.apiserver.resources import Registry, ResourceType
from trainer.machinery.status import failure

# --- serving ---------------------------------------------------------------------------------


def serve(
    registry: Registry, parts: list[str], request: web.Request
) -> dict[str, Any] | web.StreamResponse | None:
    """``/openapi/v2``, ``/openapi/v3`` and ``/openapi/v3/{api/v1|apis/g/v}``."""
    cache = _cache(registry)
    if parts == ["v2"]:
        accept = request.headers.get("Accept", "")
        if PROTOBUF_V2 in accept:
            body, digest = cache.v2(protobuf=True)
            return _document_response(request, body, digest, content_type=PROTOBUF_V2_RESPONSE)
        if accept and not _accepts_json(accept):
            return _not_acceptable(accept)
        return _document_response(request, *cache.v2(protobuf=False))
    if parts == ["v3"]:
        return cache.index()
    if len(parts) >= 3 and parts[0] == "v3":
        found = cache.group_version_document("/".join(parts[1:]))
        if found is None:
            return None
        return _document_response(request, *found)
    return None


def _accepts_json(accept: str) -> bool:
    for part in accept.split(","):
        media = part.split(";", 1)[0].strip().lower()
        if media in ("application/json", "application/*", "*/*", "*"):
            return True
    return False


def _not_acceptable(accept: str) -> web.Response:
    status = failure(
        406,
        "NotAcceptable",
        f"OpenAPI v2 is served as application/json or {PROTOBUF_V2_TYPE}, not {accept}",
    )
    return web.Response(
        body=json.dumps(status).encode(), status=406, content_type="application/json"
    )


def _document_response(
    request: web.Request, body: bytes, digest: str, *, content_type: str = "application/json"
) -> web.Response:
    etag = f'"{digest}"'
    headers = {"ETag": etag, "Vary": "Accept"}
    if request.query.get("hash") == digest:
        headers["Cache-Control"] = "public, immutable"
        headers["Expires"] = "Thu, 01 Jan 2099 00:00:00 GMT"
    else:
        headers["Cache-Control"] = "no-cache, private"
    if request.headers.get("If-None-Match") == etag:
        return web.Response(status=304, headers=headers)
    headers["Content-Type"] = content_type
    return web.Response(body=body, headers=headers)


# --- the cache -------------------------------------------------------------------------------


@dataclass
class _Document:
    types: tuple[ResourceType, ...]  # held, so identity comparison is sound
    body: bytes
    digest: str


class _Cache:
    """Serialized documents per group/version, rebuilt when the served types change (a CRD
    update replaces its ResourceType objects, so identity is the change signal)."""

    def __init__(self, registry: Registry) -> None:
        # a weak reference: the cache lives in a WeakKeyDictionary keyed by the registry
        self._registry_ref = weakref.ref(registry)
        self._v3: dict[str, _Document] = {}
        self._v2: dict[bool, _Document] = {}

    def _registry(self) -> Registry:
        registry = self._registry_ref()
        assert registry is not None, "the registry of an OpenAPI cache is gone"
        return registry

    def _by_group_version(self) -> dict[str, tuple[ResourceType, ...]]:
        out: dict[str, list[ResourceType]] = {}
        for rt in self._registry():
            out.setdefault(gv_path(rt.group, rt.version), []).append(rt)
        return {k: tuple(v) for k, v in out.items()}

    def _document(self, path: str, types: tuple[ResourceType, ...]) -> _Document:
        cached = self._v3.get(path)
        if cached is not None and _same_types(cached.types, types):
            return cached
        body = json.dumps(group_version_document(types), separators=(",", ":")).encode()
        doc = _Document(types, body, _digest(body))
        self._v3[path] = doc
        return doc

    def index(self) -> dict[str, Any]:
        groups = self._by_group_version()
        for stale in set(self._v3) - set(groups):
            del self._v3[stale]
        paths = {}
        for path, types in sorted(groups.items()):
            doc = self._document(path, types)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={doc.digest}"}
        return {"paths": paths}

    def group_version_document(self, path: str) -> tuple[bytes, str] | None:
        types = self._by_group_version().get(path)
        if types is None:
            return None
        doc = self._document(path, types)
        return doc.body, doc.digest

    def v2(self, *, protobuf: bool) -> tuple[bytes, str]:
        types = tuple(self._registry())
        cached = self._v2.get(protobuf)
        if cached is None or not _same_types(cached.types, types):
            document = swagger_document(types)
            if protobuf:
                body = swagger_protobuf(document)
            else:
                body = json.dumps(document, separators=(",", ":")).encode()
            cached = self._v2[protobuf] = _Document(types, body, _digest(body))
        return cached.body, cached.digest


_CACHES: weakref.WeakKeyDictionary[Registry, _Cache] = weakref.WeakKeyDictionary()


def _cache(registry: Registry) -> _Cache:
    cache = _CACHES.get(registry)
    if cache is None:
        cache = _CACHES[registry] = _Cache(registry)
    return cache


def _same_types(a: tuple[ResourceType, ...], b: tuple[ResourceType, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _digest(body: bytes) -> str:
    return hashlib.sha512(body).hexdigest().upper()
