"""How a rule that evaluated to false is reported: the :class:`FieldError` a user sees.

A ``x-kubernetes-validations`` entry shapes its error with four optional fields
(https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/#validation-rules):
``messageExpression`` (a CEL expression whose string result is the message; one that fails,
is blank or spans lines falls back), ``message`` (fixed text; without it the message is
``failed rule: <rule>``), ``fieldPath`` (where under the rule's node the error points, as
``.a.b`` or ``.m['key']``) and ``reason`` (the error type: ``FieldValueInvalid`` unless
``FieldValueForbidden``, ``FieldValueRequired`` or ``FieldValueDuplicate``; the first two carry
no value, as kube-apiserver's ``field.Forbidden`` and ``field.Required`` do, and a duplicate no
message). The value of an object or a list is not printed; a rule at the root names ``<nil>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from trainer.machinery.errors import (
    DUPLICATE,
    FORBIDDEN,
    INVALID,
    NIL_PATH,
    REQUIRED,
    FieldError,
    join_path,
)

from .cel_compile import CompiledRule, evaluate
from .defaults import Schema, properties_of, sub_schema

_REASONS: Final = {
    "FieldValueForbidden": FORBIDDEN,
    "FieldValueRequired": REQUIRED,
    "FieldValueDuplicate": DUPLICATE,
    "FieldValueInvalid": INVALID,
}


def failure(
    schema: Schema,
    spec: Mapping[str, Any],
    *,
    rule: str,
    value: Any,
    path: str,
    message: str | None,
) -> FieldError:
    """The error of ``spec``'s rule, failed at ``path`` on ``value``; ``message``: the
    messageExpression's text (None: none, or it failed)."""
    if message is None:
        text = spec.get("message")
        if isinstance(text, str) and text.strip():
            message = text.strip()
        else:
            message = f"failed rule: {rule.strip()}"
    field_path = spec.get("fieldPath")
    if isinstance(field_path, str) and field_path:
        path = _join_field_path(schema, path, field_path)
    path = path or NIL_PATH
    error_type = _REASONS.get(str(spec.get("reason")), INVALID)
    if error_type in (FORBIDDEN, REQUIRED):
        return FieldError(path, error_type, message)
    if error_type == DUPLICATE:
        message = ""  # field.Duplicate carries no detail
    # kube-apiserver leaves out the value of an object or a list (field.OmitValueType).
    omit = schema.get("type") in ("object", "array")
    return FieldError(path, error_type, message, value, omit_value=omit)


def message_from_expression(
    compiled: CompiledRule | None, activation: Mapping[str, Any]
) -> str | None:
    """The messageExpression's text; None (fall back to ``message``) if it fails or is blank."""
    if compiled is None or compiled.error:
        return None
    result, error = evaluate(compiled, activation)
    if error or not isinstance(result, str):
        return None
    text = str(result)
    if not text.strip() or "\n" in text:
        return None
    return text


_FIELD_PATH_PART: Final = re.compile(r"\.([^.\[]+)|\[\s*'((?:[^'\\]|\\.)*)'\s*\]|\[(\d+)\]")


def _join_field_path(schema: Schema | None, base: str, field_path: str) -> str:
    """Append a rule's ``fieldPath`` (``.a.b``, ``.m['key']``) to the node path.

    A bracketed name is a child if the schema declares it as a property, else a map key. An
    unparsable fieldPath is appended as written, so the error still points somewhere.
    """
    path = base
    pos = 0
    node = schema
    while pos < len(field_path):
        match = _FIELD_PATH_PART.match(field_path, pos)
        if match is None:
            return base + field_path if field_path.startswith((".", "[")) else base
        pos = match.end()
        if match.group(3) is not None:
            path = join_path(path, int(match.group(3)))
            node = sub_schema(node.get("items")) if node is not None else None
            continue
        name = match.group(1) if match.group(1) is not None else match.group(2)
        if match.group(2) is not None:
            name = name.replace("\\'", "'")
        if node is not None and name in properties_of(node):
            path = join_path(path, name)
            node = sub_schema(properties_of(node)[name])
        elif match.group(1) is not None:
            path = join_path(path, name)
            node = None
        else:
            path = f"{path}[{name}]"
            node = sub_schema(node.get("additionalProperties")) if node is not None else None
    return path
