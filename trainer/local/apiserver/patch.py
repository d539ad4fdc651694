"""Patch types: JSON merge (RFC 7386), JSON patch (RFC 6902) and strategic merge for built-in
kinds. Server-side apply lives in :mod:`trainer.local.apiserver.apply`."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch

from trainer.local.apiserver.errors import APIError, bad_request
from trainer.machinery.merge_keys import strategic_order

MERGE = "application/merge-patch+json"
JSON = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"
APPLY_CBOR = "application/apply-patch+cbor"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merge recursively, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise bad_request("json patch must be a list of operations")
    try:
        return jsonpatch.JsonPatch(ops).apply(target, in_place=False)
    except jsonpatch.JsonPatchTestFailed as exc:
        raise APIError(
            422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
        ) from None
    except (
        jsonpatch.JsonPatchException,
        jsonpatch.JsonPointerException,
        TypeError,
        KeyError,
    ) as exc:
        raise APIError(
            422, "Invalid", f"the server rejected our request due to an error in our request: {exc}"
        ) from None


def strategic_merge_patch(target: Any, patch: Any, merge_keys: Mapping[str, str]) -> Any:
    """Strategic merge for built-in kinds: lists named in ``merge_keys`` merge by that key
    (an empty key marks a set of scalars), ``$patch: delete|replace`` and
    ``$deleteFromPrimitiveList/<field>`` directives, ``null`` deletes."""
    return _smp(copy.deepcopy(target), patch, merge_keys, field="")


def _smp(target: Any, patch: Any, keys: Mapping[str, str], field: str) -> Any:
    if isinstance(patch, Mapping):
        if patch.get("$patch") == "replace":
            return {k: v for k, v in patch.items() if k != "$patch"}
        if patch.get("$patch") == "delete":
            return None
        out = dict(target) if isinstance(target, Mapping) else {}
        for key, value in patch.items():
            if key == "$patch" or key.startswith("$setElementOrder/"):
                continue
            if key.startswith("$deleteFromPrimitiveList/"):
                name = key.split("/", 1)[1]
                if not isinstance(value, list):
                    raise bad_request(f"{key}: the values to delete must be a list")
                current = out.get(name)
                kept = current if isinstance(current, list) else []
                out[name] = [v for v in kept if v not in value]
                continue
            if value is None:
                out.pop(key, None)
                continue
            merged = _smp(out.get(key), value, keys, key)
            if merged is None:
                out.pop(key, None)
            else:
                out[key] = merged
        return out
    if isinstance(patch, list) and field in keys and isinstance(target, list):
        key = keys[field]
        if key == "":  # a set: equality, not hashing (items may be any JSON)
            members: list[Any] = []
            for item in [*target, *patch]:
                if item not in members:
                    members.append(item)
            return members
        out_list = list(target)
        named: list[Any] = []
        for item in patch:
            if not isinstance(item, Mapping) or key not in item:
                out_list.append(item)
                continue
            if item.get("$patch") != "delete" and item[key] not in named:
                named.append(item[key])
            idx = next(
                (
                    i
                    for i, t in enumerate(out_list)
                    if isinstance(t, Mapping) and t.get(key) == item[key]
                ),
                -1,
            )
            directive = item.get("$patch")
            if directive == "delete":
                if idx >= 0:
                    del out_list[idx]
            elif idx < 0:
                out_list.append({k: v for k, v in item.items() if k != "$patch"})
            elif directive == "replace":
                out_list[idx] = {k: v for k, v in item.items() if k != "$patch"}
            else:
                out_list[idx] = _smp(out_list[idx], item, keys, field="")
        return strategic_order(out_list, list(target), named, key)
    return copy.deepcopy(patch)
