"""Validation of objects against a CRD structural schema (``openAPIV3Schema``).

It does what kube-apiserver does with a custom resource after pruning and defaulting, with
its messages (:mod:`.schema_errors`): the OpenAPI value validations, embedded resources, the
``x-kubernetes-list-type`` invariants, and then the ``x-kubernetes-validations`` CEL rules.
Every error found is returned, as a :class:`FieldError` with a Kubernetes field path
(``spec.replicatedJobs[0].name``; a map value is ``metadata.labels.foo`` in a schema error and
``metadata.labels[foo]`` in a CEL one, as kube-apiserver names them). Unknown fields are never
errors here: :func:`prune` removes them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeGuard

from trainer.machinery.errors import INVALID, NIL_PATH, REQUIRED, FieldError, join_path

from .cel import has_rules, validate_rules
from .defaults import (
    ABSENT,
    Schema,
    apply_defaults,
    canonical,
    compile_regex,
    is_embedded,
    properties_of,
    prune,
    sub_schema,
)
from .memo import RuleMemo
from .schema_errors import Messages, bound, is_blocking, list_type_errors

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
    scope: str = "",
    prior: Sequence[FieldError] = (),
    root: str | None = None,
) -> list[FieldError]:
    """Validate ``obj`` against a structural schema; return every error, in a stable order.

    ``old`` is the stored object of an update (``ABSENT`` on create): it only matters to CEL
    transition rules. ``path`` prefixes every error path. ``scope`` checks the schema only for
    that top-level field (a status update checks ``status`` alone, kube-apiserver's
    ValidateStatusUpdate); the CEL rules still see the whole object. As in kube-apiserver, an
    error of a blocking kind (a type, an enum value, a required field, a length or a count,
    also among ``prior``: the object's metadata errors) means the CEL rules are not run; a
    single error says so instead. ``memo``, kept by the caller for this one schema,
    remembers CEL rule outcomes across calls (:mod:`.memo`). ``root`` is the field path
    kube-openapi names nodes from, in messages (default: ``path``, with ``scope``): a part of a
    status checked alone is named from ``status``, as in a status update.
    """
    if root is None:
        root = join_path(path, scope) if scope else path
    walker = _Walker(Messages(root))
    if scope:
        node = sub_schema(properties_of(schema).get(scope))
        if node is not None and isinstance(obj, Mapping) and scope in obj:
            walker.check(node, obj[scope], join_path(path, scope))
    else:
        walker.check(schema, obj, path)
    errors = walker.errors
    errors += list_type_errors(schema, obj, path)
    if has_rules(schema):
        if any(is_blocking(e) for e in (*prior, *errors)):
            errors.append(FieldError(NIL_PATH, INVALID, BLOCKED_RULES_MESSAGE, None))
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
# kube-openapi's SchemaValidator runs, at each node, the type check, allOf/anyOf/oneOf/not, the
# string checks (the first failing one only), the format, the number checks, the list checks
# (items first), the enum, then the object checks (properties, then required ones).


def _kind(value: Any) -> tuple[str, str]:
    """The JSON type and format kube-openapi infers for a decoded value."""
    if isinstance(value, bool):
        return "boolean", ""
    if isinstance(value, str):
        return "string", ""
    if isinstance(value, int):
        low, high = _INT_RANGES["int64"]
        # JSON decodes an integer beyond int64 into a float64.
        return ("integer", "int64") if low <= value <= high else ("number", "float64")
    if isinstance(value, float):
        return "number", "float64"
    if isinstance(value, list):
        return "array", ""
    if isinstance(value, Mapping):
        return "object", ""
    return "", ""


def _is_integer(value: object) -> TypeGuard[int | float]:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _json_integer(value: float) -> bool:
    """A whole number JSON can hold exactly (at most 2**53: go-openapi's IsFloat64AJSONInteger)."""
    return float(value).is_integer() and abs(value) <= 2**53


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _types(schema: Schema) -> list[str]:
    """The schema's types; an int-or-string is ``integer,string`` (apiextensions sets both)."""
    if schema.get("x-kubernetes-int-or-string") is True:
        return ["integer", "string"]
    declared = schema.get("type")
    return [declared] if isinstance(declared, str) else []


def _fewest(branches: list[list[FieldError]]) -> list[FieldError]:
    """The errors of the branch that came closest to passing."""
    best = branches[0]
    for errors in branches[1:]:
        if len(errors) < len(best):
            best = errors
    return best


class _Walker:
    """One pass over a value and its errors."""

    def __init__(self, messages: Messages) -> None:
        self.m = messages
        self.errors: list[FieldError] = []
        self._seen: set[str] = set()

    def add(self, error: FieldError) -> None:
        """Add an error once: kube-openapi drops one that reads like an earlier one."""
        text = str(error)
        if text not in self._seen:
            self._seen.add(text)
            self.errors.append(error)

    def check(self, schema: Schema, value: Any, path: str) -> None:
        """Every check that applies to the value's kind, after a type error too (a float
        where an int32 goes breaks its type and its range), as kube-openapi runs them."""
        self._check_type(schema, value, path)
        if value is None:
            self._check_enum(schema, value, path)
            return
        self._check_junctors(schema, value, path)
        if isinstance(value, str):
            self._check_string(schema, value, path)
            self._check_format(schema, value, path)
        elif _is_number(value):
            self._check_number(schema, value, path)
        elif isinstance(value, list):
            self._check_array(schema, value, path)
        self._check_enum(schema, value, path)
        if isinstance(value, Mapping):
            self._check_object(schema, value, path)

    # -- type --------------------------------------------------------------------------------

    def _check_type(self, schema: Schema, value: Any, path: str) -> bool:
        """Whether the type fits, as kube-openapi's type validator decides it (a value's
        format is compared with the schema's where the value is not a string or a list)."""
        types = _types(schema)
        fmt = schema.get("format") if isinstance(schema.get("format"), str) else ""
        if not types and not fmt:
            return True
        if value is None:
            if types and "null" not in types and schema.get("nullable") is not True:
                self.add(self.m.type_error(path, ",".join(types), "null"))
                return False
            return True
        kind, kind_format = _kind(value)
        float_int = kind == "number" and _json_integer(value) and "integer" in types
        int_float = kind == "integer" and "number" in types
        fits = kind in types or float_int or int_float
        if not isinstance(value, str | list) and fmt and not (fits or kind_format == fmt):
            self.add(self.m.type_error(path, fmt, kind_format))
            return False
        numeric = "number" in types or "integer" in types
        if not numeric and fmt and isinstance(value, str | list):
            return True
        if not fits:
            self.add(self.m.type_error(path, ",".join(types), kind))
            return False
        return True

    # -- scalars -----------------------------------------------------------------------------

    def _check_format(self, schema: Schema, value: str, path: str) -> None:
        fmt = schema.get("format")
        if (fmt == "date-time" and not _DATE_TIME.match(value)) or (
            fmt == "date" and not _DATE.match(value)
        ):
            self.add(self.m.type_error(path, fmt, value))

    def _check_enum(self, schema: Schema, value: Any, path: str) -> None:
        allowed = schema.get("enum")
        if not isinstance(allowed, list):
            return
        key = canonical(value)
        if value is not None and any(canonical(a) == key for a in allowed):
            return
        self.add(self.m.unsupported(path, value, allowed))

    def _check_number(self, schema: Schema, value: float, path: str) -> None:
        types = _types(schema)
        fmt = schema.get("format")
        if types == ["integer"]:
            # Any format but int32 is checked as an int64 (kube-openapi's range check).
            low, high = _INT_RANGES["int32" if fmt == "int32" else "int64"]
            if not _is_integer(value) or not low <= value <= high:
                self.add(self.m.range_error(path, "integer", fmt if isinstance(fmt, str) else ""))
        multiple = schema.get("multipleOf")
        if _is_number(multiple) and multiple > 0 and math.isfinite(value):
            quotient = value / multiple
            if not math.isfinite(quotient) or abs(quotient - round(quotient)) > 1e-9:
                text = f"should be a multiple of {bound(multiple, value)}"
                self.add(self.m.invalid(path, value, text))
        self._check_bound(schema, value, path, "minimum", "greater than")
        self._check_bound(schema, value, path, "maximum", "less than")

    def _check_bound(self, schema: Schema, value: float, path: str, key: str, word: str) -> None:
        limit = schema.get(key)
        if not _is_number(limit):
            return
        exclusive = schema.get("exclusiveM" + key[1:]) is True
        if isinstance(value, int):
            limit = int(limit)  # kube-openapi compares an integer with the bound as int64
        below = value < limit if key == "minimum" else value > limit
        if below or (exclusive and value == limit):
            text = f"should be {word}{'' if exclusive else ' or equal to'} {bound(limit, value)}"
            self.add(self.m.invalid(path, value, text))

    def _check_string(self, schema: Schema, value: str, path: str) -> None:
        max_length = schema.get("maxLength")
        if _is_integer(max_length) and len(value) > max_length:
            self.add(self.m.too_long(path, int(max_length)))
            return
        min_length = schema.get("minLength")
        if _is_integer(min_length) and len(value) < min_length:
            text = f"should be at least {int(min_length)} chars long"
            self.add(self.m.invalid(path, value, text))
            return
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            compiled, error = compile_regex(pattern)
            if compiled is None:
                text = f"should match '{pattern}, but pattern is invalid: {error}'"
                self.add(self.m.invalid(path, value, text))
            elif compiled.search(value) is None:
                self.add(self.m.invalid(path, value, f"should match '{pattern}'"))

    # -- arrays ------------------------------------------------------------------------------

    def _check_array(self, schema: Schema, value: list[Any], path: str) -> None:
        items = sub_schema(schema.get("items"))
        if items is not None:
            for i, item in enumerate(value):
                self.check(items, item, join_path(path, i))
        min_items = schema.get("minItems")
        if _is_integer(min_items) and len(value) < min_items:
            text = f"should have at least {int(min_items)} items"
            self.add(self.m.invalid(path, len(value), text))
        max_items = schema.get("maxItems")
        if _is_integer(max_items) and len(value) > max_items:
            self.add(self.m.too_many(path, len(value), int(max_items)))
        if schema.get("uniqueItems") is True:
            keys = [canonical(v) for v in value]
            if len(set(keys)) != len(keys):
                self.add(self.m.invalid(path, "", "shouldn't contain duplicates"))

    # -- objects -----------------------------------------------------------------------------

    def _check_object(self, schema: Schema, value: Mapping[Any, Any], path: str) -> None:
        min_props = schema.get("minProperties")
        if _is_integer(min_props) and len(value) < min_props:
            text = f"should have at least {int(min_props)} properties"
            self.add(self.m.invalid(path, len(value), text))
        max_props = schema.get("maxProperties")
        if _is_integer(max_props) and len(value) > max_props:
            self.add(self.m.too_many(path, len(value), int(max_props)))
        props = properties_of(schema)
        extra = sub_schema(schema.get("additionalProperties"))
        if extra is not None:
            for key, item in value.items():
                if key not in props:
                    self.check(extra, item, f"{path}.{key}" if path else str(key))
        for key, item in value.items():
            if key in props:
                sub = sub_schema(props[key])
                if sub is not None:
                    self.check(sub, item, join_path(path, str(key)))
        required = schema.get("required")
        if isinstance(required, list):
            for name in required:
                if isinstance(name, str) and name not in value:
                    self.add(self.m.required(join_path(path, name)))
        if is_embedded(schema):
            self._check_embedded(value, path)

    def _check_embedded(self, value: Mapping[Any, Any], path: str) -> None:
        """apiVersion and kind of an ``x-kubernetes-embedded-resource`` object."""
        for key in ("apiVersion", "kind"):
            child = join_path(path, key)
            if key not in value:
                self.add(FieldError(child, REQUIRED, "must not be empty"))
                continue
            item = value[key]
            if not isinstance(item, str):
                self.add(FieldError(child, INVALID, "must be a string", item))
            elif not item:
                self.add(FieldError(child, INVALID, "must not be empty", item))
            elif key == "apiVersion" and item.count("/") > 1:
                self.add(
                    FieldError(child, INVALID, f"unexpected GroupVersion string: {item}", item)
                )
        metadata = value.get("metadata")
        if "metadata" in value and not isinstance(metadata, Mapping):
            self.add(
                FieldError(join_path(path, "metadata"), INVALID, "must be an object", metadata)
            )

    # -- allOf, anyOf, oneOf, not ------------------------------------------------------------

    def _sub_errors(self, schema: Any, value: Any, path: str) -> list[FieldError] | None:
        sub = sub_schema(schema)
        if sub is None:
            return None
        walker = _Walker(self.m)
        walker.check(sub, value, path)
        return walker.errors

    def _branches(self, schema: Schema, key: str, value: Any, path: str) -> list[list[FieldError]]:
        branches = schema.get(key)
        if not isinstance(branches, list):
            return []
        results = [self._sub_errors(b, value, path) for b in branches]
        return [r for r in results if r is not None]

    def _check_junctors(self, schema: Schema, value: Any, path: str) -> None:
        """kube-openapi's messages, each at the root with the node's quoted name."""
        quoted = self.m.quoted(path)
        any_of = self._branches(schema, "anyOf", value, path)
        if any_of and all(any_of):
            self.add(self.m.composite(f"{quoted} must validate at least one schema (anyOf)"))
            for error in _fewest(any_of):
                self.add(error)
        one_of = self._branches(schema, "oneOf", value, path)
        if one_of:
            valid = sum(1 for errors in one_of if not errors)
            if valid != 1:
                found = "Found none valid" if not valid else f"Found {valid} valid alternatives"
                text = f"{quoted} must validate one and only one schema (oneOf). {found}"
                self.add(self.m.composite(text))
                if valid == 0:
                    for error in _fewest(one_of):
                        self.add(error)
        all_of = self._branches(schema, "allOf", value, path)
        for errors in all_of:
            for error in errors:
                self.add(error)
        failed = sum(1 for errors in all_of if errors)
        if failed:
            none = ". None validated" if failed == len(all_of) else ""
            self.add(self.m.composite(f"{quoted} must validate all the schemas (allOf){none}"))
        not_errors = self._sub_errors(schema.get("not"), value, path)
        if not_errors is not None and not not_errors:
            self.add(self.m.composite(f"{quoted} must not validate the schema (not)"))
