"""The errors kube-apiserver reports for a custom resource that breaks its CRD's schema, word
for word (docs/local-plane.md, "CRD validation"): kube-openapi's messages (``NAME in body
should be ...``, NAME being the path from the validated root) turned into field errors as
apiextensions-apiserver turns them, and the ``x-kubernetes-list-type`` duplicates it finds in a
pass of its own. Checked against a real kube-apiserver by tests/cluster/test_crd_validation.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from trainer.machinery.errors import (
    DUPLICATE,
    INVALID,
    NIL_PATH,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    TYPE_INVALID_REASON,
    UNSUPPORTED,
    FieldError,
    Rendered,
    join_path,
)
from trainer.machinery.gofmt import go_float, go_json, go_quote

from .defaults import (
    UNSPECIFIED,
    Schema,
    canonical,
    child_path,
    child_schema,
    list_map_keys,
    sub_schema,
)

# The errors after which kube-apiserver does not run the CEL rules (hasBlockingErr).
_BLOCKING: Final = frozenset({UNSUPPORTED, REQUIRED, TOO_LONG, TOO_MANY})


def is_blocking(error: FieldError) -> bool:
    return error.type in _BLOCKING or error.reason == TYPE_INVALID_REASON


def bound(limit: float, value: float) -> str:
    """A minimum or maximum as kube-openapi prints it: an integer for an integer value (it
    compares integers as int64), else Go's ``%v`` of the float."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(int(limit))
    return go_float(float(limit))


class Messages:
    """Field errors for one validation: ``root`` is the field path of the validated value
    ("" for a whole object, ``status`` for a status update); kube-openapi names a node by its
    path from there, and a path-less error sits at ``root`` (``<nil>`` for a whole object)."""

    def __init__(self, root: str = "") -> None:
        self.root = root

    def name(self, path: str) -> str:
        if self.root and path.startswith(self.root):
            return path[len(self.root) :].lstrip(".")
        return path

    def at_root(self) -> str:
        return self.root or NIL_PATH

    def _where(self, path: str) -> str:
        return f"{self.name(path)} in body"

    def _at(self, path: str) -> str:
        return path or NIL_PATH

    def type_error(self, path: str, wanted: str, actual: str) -> FieldError:
        message = f"{self._where(path)} must be of type {wanted}: {go_quote(actual)}"
        return FieldError(self._at(path), INVALID, message, actual, reason=TYPE_INVALID_REASON)

    def invalid(self, path: str, value: Any, text: str) -> FieldError:
        """kube-openapi's default case: ``Invalid value`` with its message."""
        return FieldError(self._at(path), INVALID, f"{self._where(path)} {text}", value)

    def composite(self, text: str) -> FieldError:
        """An error kube-openapi raises without a field (anyOf, oneOf, allOf, not, a number's
        format range): at the root, with an empty value."""
        return FieldError(self.at_root(), INVALID, text, "")

    def quoted(self, path: str) -> str:
        return go_quote(self.name(path))

    def required(self, path: str) -> FieldError:
        return FieldError(path, REQUIRED, "")

    def too_long(self, path: str, limit: int) -> FieldError:
        unit = "byte" if limit == 1 else "bytes"
        return FieldError(self._at(path), TOO_LONG, f"may not be more than {limit} {unit}")

    def too_many(self, path: str, count: int, limit: int) -> FieldError:
        unit = "item" if limit == 1 else "items"
        return FieldError(self._at(path), TOO_MANY, f"must have at most {limit} {unit}", count)

    def unsupported(self, path: str, value: Any, allowed: list[Any]) -> FieldError:
        texts = (a if isinstance(a, str) else go_json(a) for a in allowed)
        supported = ", ".join(go_quote(t) for t in texts)
        return FieldError(self._at(path), UNSUPPORTED, f"supported values: {supported}", value)

    def range_error(self, path: str, type_name: str, fmt: str) -> FieldError:
        kind = f"{type_name} with format {fmt}" if fmt else f"{type_name} (default format)"
        return self.composite(f"Checked value must be of type {kind} in {self.name(path)}")


# --- x-kubernetes-list-type ----------------------------------------------------------------


def list_type_errors(schema: Schema, value: Any, path: str = "") -> list[FieldError]:
    """Duplicates in ``set`` and ``map`` lists, in a walk of their own after the schema's
    checks (paths with ``[key]`` for map values, as field.Path prints them)."""
    errors: list[FieldError] = []
    _walk_lists(schema, value, path, errors)
    return errors


def _walk_lists(schema: Schema, value: Any, path: str, errors: list[FieldError]) -> None:
    if isinstance(value, list):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            errors.extend(_set_duplicates(value, path))
        elif list_type == "map":
            errors.extend(_map_duplicates(schema, value, path))
        items = sub_schema(schema.get("items"))
        if items is not None:
            for i, item in enumerate(value):
                _walk_lists(items, item, join_path(path, i), errors)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            sub, is_prop = child_schema(schema, key)
            if sub is not None:
                _walk_lists(sub, item, child_path(path, key, is_prop), errors)


def _shown(value: Any) -> Any:
    return Rendered(go_json(value)) if isinstance(value, dict | list) else value


def _set_duplicates(value: list[Any], path: str) -> list[FieldError]:
    seen: set[Any] = set()
    out = []
    for i, item in enumerate(value):
        key = canonical(item)
        if key in seen:
            out.append(FieldError(join_path(path, i), DUPLICATE, "", _shown(item)))
        seen.add(key)
    return out


def _map_duplicates(schema: Schema, value: list[Any], path: str) -> list[FieldError]:
    """Items whose key fields repeat an earlier item's; each printed as the map of its key
    fields that are set (an absent key is no value)."""
    keys = list_map_keys(schema)
    seen: set[Any] = set()
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            continue
        present = {k: item[k] for k in keys if k in item}
        identity = tuple((k, canonical(present[k]) if k in present else UNSPECIFIED) for k in keys)
        if identity in seen:
            out.append(FieldError(join_path(path, i), DUPLICATE, "", Rendered(go_json(present))))
        seen.add(identity)
    return out
