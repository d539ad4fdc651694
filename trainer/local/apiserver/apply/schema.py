"""Server-side apply: how each position of an object merges.

From the CRD schema (``x-kubernetes-list-type``, ``-list-map-keys``, ``-map-type``) or, for the
built-in kinds, their strategic-merge keys; parts with no schema are granular maps and atomic
lists (structured-merge-diff's "deduced" type).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from trainer.local.apiserver.resources import ResourceType

# --- schema -------------------------------------------------------------------------------


class Schema:
    """How the values at one position of an object merge.

    The base class is structured-merge-diff's *deduced* type: maps are granular and their keys
    are not declared fields, lists are atomic.
    """

    def __init__(
        self,
        *,
        atomic_map: bool = False,
        list_type: str = "atomic",
        list_keys: tuple[str, ...] = (),
        key_defaults: Mapping[str, Any] | None = None,
    ) -> None:
        self.atomic_map = atomic_map
        self.list_type = list_type
        self.list_keys = list_keys
        self.key_defaults: Mapping[str, Any] = key_defaults or {}

    def child(self, key: str) -> tuple[Schema, bool]:
        """Schema of a map value and whether ``key`` is a declared (struct) field."""
        return _DEDUCED, False

    def item(self) -> Schema:
        """Schema of a list item."""
        return _DEDUCED


_DEDUCED: Final = Schema()


class _CRDSchema(Schema):
    """A node of a CRD's structural openAPIV3Schema."""

    def __init__(self, node: Mapping[str, Any]) -> None:
        list_type = str(node.get("x-kubernetes-list-type") or "atomic")
        keys = tuple(str(k) for k in node.get("x-kubernetes-list-map-keys") or ())
        if list_type == "map" and not keys:
            list_type = "atomic"
        items = node.get("items")
        props = (items.get("properties") if isinstance(items, dict) else None) or {}
        defaults = {
            k: props[k]["default"]
            for k in keys
            if isinstance(props.get(k), dict) and "default" in props[k]
        }
        super().__init__(
            atomic_map=node.get("x-kubernetes-map-type") == "atomic",
            list_type=list_type,
            list_keys=keys,
            key_defaults=defaults,
        )
        self._node = node
        self._children: dict[str, tuple[Schema, bool]] = {}
        self._item: Schema | None = None

    def child(self, key: str) -> tuple[Schema, bool]:
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = self._resolve_child(key)
        return found

    def _resolve_child(self, key: str) -> tuple[Schema, bool]:
        props = self._node.get("properties")
        if isinstance(props, dict) and isinstance(props.get(key), dict):
            return _CRDSchema(props[key]), True
        if self._node.get("x-kubernetes-embedded-resource"):
            if key == "metadata":
                return _OBJECT_META, True
            if key in ("apiVersion", "kind"):
                return _DEDUCED, True
        extra = self._node.get("additionalProperties")
        if isinstance(extra, dict):
            return _CRDSchema(extra), False
        return _DEDUCED, False

    def item(self) -> Schema:
        if self._item is None:
            items = self._node.get("items")
            self._item = _CRDSchema(items) if isinstance(items, dict) else _DEDUCED
        return self._item


class _BuiltinSchema(Schema):
    """A position in a built-in kind, known only by its field name.

    Every map key is a declared field; lists named in ``merge_keys`` are list-maps (``""``: a
    set of scalars), others atomic. ``ports`` is keyed like Kubernetes does: by
    ``containerPort`` and ``protocol`` (``port`` and ``protocol`` in a Service), protocol
    defaulting to ``TCP``.
    """

    def __init__(self, kind: str, merge_keys: Mapping[str, str], name: str) -> None:
        key = merge_keys.get(name) if name else None
        if key is None:
            super().__init__()
        elif key == "":
            super().__init__(list_type="set")
        elif name == "ports":
            first = "port" if kind == "Service" else "containerPort"
            super().__init__(
                list_type="map", list_keys=(first, "protocol"), key_defaults={"protocol": "TCP"}
            )
        else:
            super().__init__(list_type="map", list_keys=(key,))
        self._kind = kind
        self._merge_keys = merge_keys
        self._children: dict[str, tuple[Schema, bool]] = {}

    def child(self, key: str) -> tuple[Schema, bool]:
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = (_BuiltinSchema(self._kind, self._merge_keys, key), True)
        return found

    def item(self) -> Schema:
        return self.child("")[0]


class _ObjectMetaSchema(Schema):
    """``metadata`` of any object: labels/annotations maps, ownerReferences by uid, finalizers."""

    _OWNER_REFERENCES: Final = Schema(list_type="map", list_keys=("uid",))
    _FINALIZERS: Final = Schema(list_type="set")

    def child(self, key: str) -> tuple[Schema, bool]:
        if key == "ownerReferences":
            return self._OWNER_REFERENCES, True
        if key == "finalizers":
            return self._FINALIZERS, True
        return _DEDUCED, True


_OBJECT_META: Final = _ObjectMetaSchema()


class _RootSchema(Schema):
    """The top of an object: ``apiVersion``, ``kind``, ``metadata``, then the kind's fields."""

    def __init__(self, inner: Schema) -> None:
        super().__init__()
        self._inner = inner

    def child(self, key: str) -> tuple[Schema, bool]:
        if key == "metadata":
            return _OBJECT_META, True
        if key in ("apiVersion", "kind"):
            return _DEDUCED, True
        return self._inner.child(key)


def root_schema(rt: ResourceType) -> Schema:
    if not rt.builtin:
        return _RootSchema(_CRDSchema(rt.schema) if rt.schema else _DEDUCED)
    return _RootSchema(_BuiltinSchema(rt.kind, rt.merge_keys, ""))
