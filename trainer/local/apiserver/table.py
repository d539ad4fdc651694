"""Table responses (meta.k8s.io/v1 Table) for ``kubectl get``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer.local.apiserver.resources import ResourceType

if TYPE_CHECKING:
    from trainer.local.apiserver.server import APIServer


def to_table(
    server: APIServer, rt: ResourceType, body: dict[str, Any], *, is_list: bool, include_object: str
) -> dict[str, Any]:
    items = body.get("items", []) if is_list else [body]
    columns = [
        {"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0}
    ]
    rows = [
        {
            "cells": [i["metadata"]["name"]],
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": i["metadata"],
            },
        }
        for i in items
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": str(server.store.rv)},
        "columnDefinitions": columns,
        "rows": rows,
    }
