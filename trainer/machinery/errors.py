"""Field errors shaped like Kubernetes' ``field.Error``.

Every error a user can cause names the field (a dotted path with ``[i]`` indexes and
``[key]`` map keys), the kind of problem, the offending value where it helps, and what is
accepted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from trainer.machinery.gofmt import go_float, go_quote

# The error types of k8s.io/apimachinery/pkg/util/validation/field, with their wire text.
INVALID = "Invalid value"
REQUIRED = "Required value"
UNSUPPORTED = "Unsupported value"
DUPLICATE = "Duplicate value"
FORBIDDEN = "Forbidden"
TOO_LONG = "Too long"
TOO_MANY = "Too many"
NOT_FOUND = "Not found"
INTERNAL = "Internal error"
TYPE_INVALID = "Invalid value"

_NO_VALUE: Any = object()


# The path kube-apiserver names for an error about the whole object (a nil field.Path).
NIL_PATH = "<nil>"
# The cause reason of a type error (field.TypeInvalid): it reads "Invalid value" like any
# other, but blocks the CEL rules (docs/local-plane.md, "CRD validation").
TYPE_INVALID_REASON = "FieldValueTypeInvalid"


@dataclass(frozen=True)
class Rendered:
    """A value an error prints as it is (already printed as Go prints it)."""

    text: str


def format_value(value: Any) -> str:
    """Render a value the way Kubernetes prints it inside a field error: Go's ``%v`` for
    numbers and booleans, ``%q`` for strings (apimachinery's ``field.Error.ErrorBody``)."""
    if isinstance(value, Rendered):
        return value.text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, int):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return json.dumps(str(value))


@dataclass(frozen=True)
class FieldError:
    """One problem with one field of an object."""

    path: str
    type: str
    message: str = ""
    value: Any = field(default=_NO_VALUE, compare=False)
    # Printed without its value, as kube-apiserver prints a CEL rule's error on an object or
    # a list (field.OmitValueType); ``value`` still holds it for callers.
    omit_value: bool = field(default=False, compare=False)
    # The cause's reason when it is not the type's own (TYPE_INVALID_REASON).
    reason: str = field(default="", compare=False)

    @property
    def has_value(self) -> bool:
        return self.value is not _NO_VALUE

    def __str__(self) -> str:
        # An error about the whole object (a root-level rule) has no path to show.
        parts = [f"{self.path}: {self.type}" if self.path else self.type]
        shown = (INVALID, UNSUPPORTED, DUPLICATE, NOT_FOUND, TOO_MANY)
        if self.has_value and not self.omit_value and self.type in shown:
            parts.append(format_value(self.value))
        if self.message:
            parts.append(self.message)
        return ": ".join(parts)


def join_path(base: str, key: str | int) -> str:
    """Append a child to a field path: a property name, a list index or a map key."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    if not base:
        return key
    return f"{base}.{key}"


def format_errors(errors: list[FieldError]) -> str:
    """Join errors the way Kubernetes aggregates them: ``[a, b]`` for several, bare for one."""
    if len(errors) == 1:
        return str(errors[0])
    return "[" + ", ".join(str(e) for e in errors) + "]"
