"""Strategic merge patch over plain JSON data, with the patch strategies of the Kubernetes
types a runtime template holds.

Kubernetes' strategic merge reads merge keys from Go struct tags; the fields that matter in a
JobSet spec are few and unambiguous by name, so they are listed by name
(:data:`trainer.machinery.merge_keys.JOBSET_MERGE_KEYS`, shared with the local API server):

* merged by ``name``: ``replicatedJobs``, ``containers``, ``initContainers``, ``volumes``,
  ``env``, ``imagePullSecrets``, ``schedulingGates``, ``resourceClaims``, ``claims``;
* merged by ``mountPath``: ``volumeMounts``; by ``containerPort``: ``ports``;
* every other list (``tolerations``, ``command``, ``args``, ``envFrom``...) is replaced;
* maps merge key by key; ``null`` in the patch deletes a key;
* directives: ``$patch: replace`` (a map or list item replaces wholesale), ``$patch: delete``
  (a list item removes the matching item, a map removes itself).

The merged list is ordered as Kubernetes' strategic merge orders it (apimachinery's
``strategicpatch.mergeSlice``, observed on upstream's controller, docs/side-by-side.md): the
items the patch names, in the patch's order, interleaved with the items only the original
has, in the original's order. At each step the next original-only item goes first only when
it stood before the next patch item in the original; a patch item the original lacks goes
first. So a volume a runtimePatch adds lands *before* the runtime's own volumes, and
patching an existing container keeps the containers' order.

Both sides are JSON data as ``json.loads`` or a model's ``to_wire`` makes it: objects are
``dict`` (checked as such: an ``isinstance`` against the ``Mapping`` ABC costs several times
more, and this runs on every admission review and reconcile).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from trainer.machinery.merge_keys import JOBSET_MERGE_KEYS, strategic_order

PATCH = "$patch"


def strategic_merge(original: Any, patch: Any, *, in_place: bool = False) -> Any:
    """A new value: ``patch`` merged onto ``original``; neither argument is modified.

    ``in_place``: the caller owns ``original`` and gives it up; it is merged into (and
    returned) without being copied first. The result never shares a dict or list with
    ``patch`` either way.
    """
    return _merge_value(original if in_place else copy.deepcopy(original), patch, field="")


def _merge_value(original: Any, patch: Any, field: str) -> Any:
    if isinstance(patch, dict):
        if patch.get(PATCH) == "replace":
            return _clean(patch)
        if not isinstance(original, dict):
            return _clean(patch)
        return _merge_map(original, patch)
    if isinstance(patch, list):
        key = JOBSET_MERGE_KEYS.get(field)
        if key is None or not isinstance(original, list):
            return [_clean(p) for p in patch]
        return _merge_list(original, patch, key)
    return patch  # JSON scalars are immutable


def _merge_map(original: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    for name, value in patch.items():
        if name == PATCH:
            continue
        if value is None or (isinstance(value, dict) and value.get(PATCH) == "delete"):
            original.pop(name, None)
        else:
            original[name] = _merge_value(original.get(name), value, field=name)
    return original


def _merge_list(original: list[Any], patch: list[Any], key: str) -> list[Any]:
    out = list(original)

    def find(k: Any) -> int:
        for i, item in enumerate(out):
            if isinstance(item, dict) and item.get(key) == k:
                return i
        return -1

    named: list[Any] = []  # the keys the patch names (not deletes), in its order
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(_clean(item))
            continue
        i = find(item[key])
        directive = item.get(PATCH)
        if directive == "delete":
            if i >= 0:
                del out[i]
            continue
        if item[key] not in named:
            named.append(item[key])
        if i < 0:
            out.append(_clean(item))
        elif directive == "replace":
            out[i] = _clean(item)
        else:
            out[i] = _merge_map(out[i], item)
    return strategic_order(out, original, named, key)


def _clean(value: Any) -> Any:
    """A copy of patch data without directives, for places where it lands verbatim."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k != PATCH and v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def merge_string_maps(*maps: Mapping[str, str] | None) -> dict[str, str]:
    """Key-by-key union; later maps win."""
    out: dict[str, str] = {}
    for m in maps:
        if m:
            out.update(m)
    return out
