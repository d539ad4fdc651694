"""Validation of objects against a CRD structural schema (``openAPIV3Schema``).

It mirrors what kube-apiserver does with a custom resource after pruning and defaulting:
OpenAPI value validations, the ``x-kubernetes-list-type`` invariants, embedded resources, and
then the ``x-kubernetes-validations`` CEL rules. Every error found is returned, as a
:class:`FieldError` with a Kubernetes field path (``spec.replicatedJobs[0].name``,
``metadata.labels[foo]``). Unknown fields are never errors here: :func:`prune` removes them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeGuard

from trainer.machinery.errors import (
    DUPLICATE,
    INVALID,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    UNSUPPORTED,
    FieldError,
    join_path,
)

from .cel import has_rules, validate_rules
from .defaults import (
    ABSENT,
    UNSPECIFIED,
    Schema,
    apply_defaults,
    canonical,
    child_path,
    child_schema,
    compile_regex,
    is_embedded,
    list_map_key_values,
    map_key_identity,
    prune,
    sub_schema,
)
from .memo import RuleMemo

BLOCKED_RULES_MESSAGE: Final = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)

_INT_RANGES: Final = {
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
_DATE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATE_TIME: Final = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)


def validate(
    schema: Mapping[str, Any],
    obj: Any,
    old: Any = ABSENT,
    *,
    path: str = "",
    memo: RuleMemo | None = None,
) -> list[FieldError]:
    """Validate ``obj`` against a structural schema; return every error, in a stable order.

    ``old`` is the stored object of an update (``ABSENT`` on create): it only matters to CEL
    transition rules. ``path`` prefixes every error path. A type error stops the checks below
    its node. As in the apiserver, a type error or an unsupported enum value anywhere means the
    CEL rules are not run; a single error says so instead. ``memo``, kept by the caller for
    this one schema, remembers CEL rule outcomes across calls (:mod:`.memo`).
    """
    walker = _Walker()
    walker.check(schema, obj, path)
    errors = walker.errors
    if has_rules(schema):
        if walker.blocking:
            errors.append(FieldError(path, INVALID, BLOCKED_RULES_MESSAGE))
        else:
            errors.extend(validate_rules(schema, obj, old, path=path, memo=memo))
    return errors


def check(
    schema: Mapping[str, Any],
    obj: Any,
    old: Any = ABSENT,
    *,
    resource_root: bool = True,
    unknown_fields: list[str] | None = None,
) -> tuple[Any, list[FieldError]]:
    """Prune, default and validate ``obj`` as the apiserver does on create or update.

    Returns the pruned and defaulted object and its errors. Unknown fields are not errors: their
    paths are appended to ``unknown_fields`` when a list is given (for kubectl-like warnings).
    """
    pruned, removed = prune(schema, obj, resource_root=resource_root)
    if unknown_fields is not None:
        unknown_fields.extend(removed)
    defaulted = apply_defaults(schema, pruned, in_place=True)  # pruned is a fresh copy
    return defaulted, validate(schema, defaulted, old)


# --- the walk -------------------------------------------------------------------------------


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _is_integer(value: object) -> TypeGuard[int | float]:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and value.is_integer()


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


_TYPE_CHECKS: Final[dict[str, Callable[[Any], bool]]] = {
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": _is_integer,
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
}


def _num(value: Any) -> str:
    """A schema bound as Go's ``%v`` prints it: ``1``, ``1.5``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _quote(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    return json.dumps(json.dumps(value, sort_keys=True, default=str))


def _render_key_values(key_values: Mapping[str, Any]) -> str:
    """List-map keys as Go prints a map: ``map[name:node]``."""
    parts = []
    for key in sorted(key_values):
        value = key_values[key]
        if value is UNSPECIFIED:
            text = "<unspecified>"
        elif isinstance(value, str):
            text = value
        else:
            text = json.dumps(value, sort_keys=True, default=str)
        parts.append(f"{key}:{text}")
    return "map[" + " ".join(parts) + "]"


def _fewest(branches: list[list[FieldError]]) -> list[FieldError]:
    """The errors of the branch that came closest to passing."""
    best = branches[0]
    for errors in branches[1:]:
        if len(errors) < len(best):
            best = errors
    return best


class _Walker:
    """One pass over a value: its errors, and whether one of them blocks the CEL rules."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []
        self.blocking = False

    def add(self, path: str, kind: str, message: str, value: Any = ABSENT) -> None:
        if value is ABSENT:
            self.errors.append(FieldError(path, kind, message))
        else:
            self.errors.append(FieldError(path, kind, message, value))

    def check(self, schema: Schema, value: Any, path: str) -> None:
        if not self._check_type(schema, value, path) or value is None:
            return
        self._check_format(schema, value, path)
        self._check_enum(schema, value, path)
        if _is_number(value):
            self._check_number(schema, value, path)
        elif isinstance(value, str):
            self._check_string(schema, value, path)
        elif isinstance(value, list):
            self._check_array(schema, value, path)
        elif isinstance(value, Mapping):
            self._check_object(schema, value, path)
        self._check_junctors(schema, value, path)

    # -- type --------------------------------------------------------------------------------

    def _check_type(self, schema: Schema, value: Any, path: str) -> bool:
        """Whether the type fits; a mismatch is a (blocking) error."""
        expected = schema.get("type")
        int_or_string = schema.get("x-kubernetes-int-or-string") is True
        if value is None:
            if schema.get("nullable") is True or (expected is None and not int_or_string):
                return True
            wanted = "integer or string" if int_or_string else str(expected)
            self._type_error(path, value, wanted)
            return False
        if int_or_string:
            if _is_integer(value) or isinstance(value, str):
                return True
            self._type_error(path, value, "integer or string")
            return False
        if not isinstance(expected, str):
            return True
        test = _TYPE_CHECKS.get(expected)
        if test is None or test(value):
            return True
        self._type_error(path, value, expected)
        return False

    def _type_error(self, path: str, value: Any, wanted: str) -> None:
        self.blocking = True
        self.add(path, INVALID, f"must be of type {wanted}", value)

    # -- scalars -----------------------------------------------------------------------------

    def _check_format(self, schema: Schema, value: Any, path: str) -> None:
        fmt = schema.get("format")
        if fmt in _INT_RANGES and _is_integer(value):
            low, high = _INT_RANGES[fmt]
            if value < low:
                self.add(path, INVALID, f"should be greater than or equal to {low}", value)
            elif value > high:
                self.add(path, INVALID, f"should be less than or equal to {high}", value)
        elif isinstance(value, str) and (
            (fmt == "date-time" and not _DATE_TIME.match(value))
            or (fmt == "date" and not _DATE.match(value))
        ):
            self.add(path, INVALID, f"must be of type {fmt}", value)

    def _check_enum(self, schema: Schema, value: Any, path: str) -> None:
        allowed = schema.get("enum")
        if not isinstance(allowed, list):
            return
        key = canonical(value)
        if any(canonical(a) == key for a in allowed):
            return
        self.blocking = True
        supported = ", ".join(_quote(a) for a in allowed)
        self.add(path, UNSUPPORTED, f"supported values: {supported}", value)

    def _check_number(self, schema: Schema, value: float, path: str) -> None:
        minimum = schema.get("minimum")
        if _is_number(minimum):
            if schema.get("exclusiveMinimum") is True:
                if not value > minimum:
                    self.add(path, INVALID, f"should be greater than {_num(minimum)}", value)
            elif not value >= minimum:
                message = f"should be greater than or equal to {_num(minimum)}"
                self.add(path, INVALID, message, value)
        maximum = schema.get("maximum")
        if _is_number(maximum):
            if schema.get("exclusiveMaximum") is True:
                if not value < maximum:
                    self.add(path, INVALID, f"should be less than {_num(maximum)}", value)
            elif not value <= maximum:
                self.add(path, INVALID, f"should be less than or equal to {_num(maximum)}", value)
        multiple = schema.get("multipleOf")
        if _is_number(multiple) and multiple > 0 and math.isfinite(value):
            quotient = value / multiple
            if not math.isfinite(quotient) or abs(quotient - round(quotient)) > 1e-9:
                self.add(path, INVALID, f"should be a multiple of {_num(multiple)}", value)

    def _check_string(self, schema: Schema, value: str, path: str) -> None:
        max_length = schema.get("maxLength")
        if _is_integer(max_length) and len(value) > max_length:
            self.add(path, TOO_LONG, f"may not be more than {_num(max_length)} bytes", value)
        min_length = schema.get("minLength")
        if _is_integer(min_length) and len(value) < min_length:
            self.add(path, INVALID, f"should be at least {_num(min_length)} chars long", value)
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            compiled, error = compile_regex(pattern)
            if compiled is None:
                self.add(path, INVALID, f"invalid pattern {pattern!r}: {error}", value)
            elif compiled.search(value) is None:
                self.add(path, INVALID, f"should match '{pattern}'", value)

    # -- arrays ------------------------------------------------------------------------------

    def _check_array(self, schema: Schema, value: list[Any], path: str) -> None:
        max_items = schema.get("maxItems")
        if _is_integer(max_items) and len(value) > max_items:
            self.add(path, TOO_MANY, f"must have at most {_num(max_items)} items", len(value))
        min_items = schema.get("minItems")
        if _is_integer(min_items) and len(value) < min_items:
            self.add(path, INVALID, f"should have at least {_num(min_items)} items", value)
        if schema.get("uniqueItems") is True:
            keys = [canonical(v) for v in value]
            if len(set(keys)) != len(keys):
                self.add(path, INVALID, "shouldn't contain duplicates", value)
        items = sub_schema(schema.get("items"))
        if items is not None:
            for i, item in enumerate(value):
                self.check(items, item, join_path(path, i))
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            self._check_set(value, path)
        elif list_type == "map":
            self._check_list_map(schema, value, path)

    def _check_set(self, value: list[Any], path: str) -> None:
        seen: set[Any] = set()
        for i, item in enumerate(value):
            key = canonical(item)
            if key in seen:
                self.add(join_path(path, i), DUPLICATE, "", item)
            seen.add(key)

    def _check_list_map(self, schema: Schema, value: list[Any], path: str) -> None:
        seen: set[Any] = set()
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                continue  # the items' type check reports it
            key_values = list_map_key_values(schema, item)
            if not key_values:
                continue
            identity = map_key_identity(key_values)
            if identity in seen:
                self.add(join_path(path, i), DUPLICATE, "", _render_key_values(key_values))
            seen.add(identity)

    # -- objects -----------------------------------------------------------------------------

    def _check_object(self, schema: Schema, value: Mapping[Any, Any], path: str) -> None:
        required = schema.get("required")
        if isinstance(required, list):
            for name in required:
                if isinstance(name, str) and name not in value:
                    self.add(join_path(path, name), REQUIRED, "")
        max_props = schema.get("maxProperties")
        if _is_integer(max_props) and len(value) > max_props:
            self.add(path, TOO_MANY, f"must have at most {_num(max_props)} items", len(value))
        min_props = schema.get("minProperties")
        if _is_integer(min_props) and len(value) < min_props:
            message = f"should have at least {_num(min_props)} properties"
            self.add(path, INVALID, message, value)
        if is_embedded(schema):
            self._check_embedded(value, path)
        for key, item in value.items():
            sub, is_prop = child_schema(schema, key)
            if sub is not None:
                self.check(sub, item, child_path(path, key, is_prop))

    def _check_embedded(self, value: Mapping[Any, Any], path: str) -> None:
        """apiVersion and kind of an ``x-kubernetes-embedded-resource`` object."""
        for key in ("apiVersion", "kind"):
            child = join_path(path, key)
            if key not in value:
                self.add(child, REQUIRED, "must not be empty")
                continue
            item = value[key]
            if not isinstance(item, str):
                self.add(child, INVALID, "must be a string", item)
            elif not item:
                self.add(child, INVALID, "must not be empty", item)
            elif key == "apiVersion" and item.count("/") > 1:
                self.add(child, INVALID, f"unexpected GroupVersion string: {item}", item)
        metadata = value.get("metadata")
        if "metadata" in value and not isinstance(metadata, Mapping):
            self.add(join_path(path, "metadata"), INVALID, "must be an object", metadata)

    # -- allOf, anyOf, oneOf, not ------------------------------------------------------------

    def _sub_errors(self, schema: Any, value: Any, path: str) -> list[FieldError] | None:
        sub = sub_schema(schema)
        if sub is None:
            return None
        walker = _Walker()
        walker.check(sub, value, path)
        return walker.errors

    def _branches(self, schema: Schema, key: str, value: Any, path: str) -> list[list[FieldError]]:
        branches = schema.get(key)
        if not isinstance(branches, list):
            return []
        results = [self._sub_errors(b, value, path) for b in branches]
        return [r for r in results if r is not None]

    def _check_junctors(self, schema: Schema, value: Any, path: str) -> None:
        for errors in self._branches(schema, "allOf", value, path):
            self.errors.extend(errors)
        any_of = self._branches(schema, "anyOf", value, path)
        if any_of and all(any_of):
            self.add(path, INVALID, "must validate at least one schema (anyOf)", value)
            self.errors.extend(_fewest(any_of))
        one_of = self._branches(schema, "oneOf", value, path)
        if one_of:
            valid = sum(1 for errors in one_of if not errors)
            if valid != 1:
                self.add(path, INVALID, "must validate one and only one schema (oneOf)", value)
                if valid == 0:
                    self.errors.extend(_fewest(one_of))
        not_errors = self._sub_errors(schema.get("not"), value, path)
        if not_errors is not None and not not_errors:
            self.add(path, INVALID, "must not validate the schema (not)", value)
