"""Metadata-only reads: ``Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1``
(and ``as=PartialObjectMetadataList`` for lists), what client-go's metadata client asks for. Its
informers (kube-controller-manager's garbage collector, any ``metadatainformer``) decode only
``meta.k8s.io/v1`` kinds: a watch event whose object is a Pod fails there with ``no kind "Pod"
is registered``. kube-apiserver answers every object of such a get, list or watch (bookmarks
included) as ``PartialObjectMetadata``, its metadata only (docs/local-plane.md, "Content
types")."""

from __future__ import annotations

from typing import Any

GROUP_VERSION = "meta.k8s.io/v1"
PROTOBUF = "application/vnd.kubernetes.protobuf"


def _ranges(accept: str) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for part in accept.split(","):
        items = [p.strip() for p in part.split(";")]
        params = dict(p.split("=", 1) for p in items[1:] if "=" in p)
        out.append({"type": items[0], **{k.strip(): v.strip() for k, v in params.items()}})
    return out


def wanted(accept: str) -> bool:
    """Whether the first media range of ``accept`` this server can answer (it writes JSON, not
    protobuf) asks for metadata only."""
    for media in _ranges(accept):
        if media["type"] == PROTOBUF:
            continue
        kind = media.get("as", "")
        return kind.startswith("PartialObjectMetadata") and media.get("g") == "meta.k8s.io"
    return False


def partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": GROUP_VERSION,
        "metadata": obj.get("metadata") or {},
    }


def partial_list(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": GROUP_VERSION,
        "metadata": body.get("metadata") or {},
        "items": [partial(item) for item in body.get("items") or []],
    }
