"""Kubernetes object metadata rules, as kube-apiserver applies them to every object it stores.

Two stages, as in Kubernetes:

1. **Decoding** (:func:`decode_object_meta`): what ``json.Unmarshal`` into ``ObjectMeta``
   refuses, such as ``labels: "x"``, ``labels: {a: 5}``, ``finalizers: [{}]``, a name that is
   a number, a generation that is not an int64 or ownerReferences that are not a list of
   objects. Kubernetes answers these with 400 BadRequest, so :class:`DecodeError` carries the
   message Go's decoder gives (``json: cannot unmarshal string into Go struct field
   ObjectMeta.metadata.labels of type map[string]string``). Decoding also normalises what Go
   reads as a zero value: a ``null`` field is dropped, a ``null`` label or annotation value or
   list item becomes ``""``, and fields ``ObjectMeta`` does not have are dropped.
2. **Validation** (:func:`validate_object_meta`): ``ValidateObjectMetaAccessor`` of
   k8s.io/apimachinery/pkg/api/validation/objectmeta.go with the string rules of
   k8s.io/apimachinery/pkg/util/validation: the name (the kind's rule), generateName (the same
   rule as a prefix), the namespace, label keys and values, annotation keys and total size,
   finalizers, ownerReferences and managedFields. Problems are :class:`FieldError` s at the
   paths and with the messages Kubernetes reports (``metadata.labels: Invalid value: "a b":
   name part must consist of ...``); the API server answers them with 422 Invalid.

Everything here is pure (no I/O), so the API server, ``trainer validate`` and tests share it;
the string rules themselves are in :mod:`trainer.machinery.names`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

from trainer.machinery.errors import FORBIDDEN, INVALID, REQUIRED, TOO_LONG, FieldError
from trainer.machinery.names import (
    FIELD_MANAGER_MAX,
    NEGATIVE_MSG,
    SUBRESOURCE_NAME_MAX,
    TOTAL_ANNOTATION_SIZE,
    NameRule,
    byte_length,
    is_qualified_name,
    is_valid_label_value,
    name_is_dns_label,
    name_is_dns_subdomain,
)

# --- decoding ------------------------------------------------------------------------------------


class DecodeError(ValueError):
    """A value Go's JSON decoder refuses; ``str()`` is the decoder's message."""


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return f"number {value}" if isinstance(value, int) else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _fail(value: Any, struct: str, path: str, go_type: str) -> DecodeError:
    shown = _json_type(value)
    if shown.startswith("number ") and go_type not in ("int64", "int32"):
        shown = "number"
    if len(shown) > 80:
        shown = shown[:80] + "..."
    return DecodeError(
        f"json: cannot unmarshal {shown} into Go struct field {struct}.{path} of type {go_type}"
    )


INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


def decode_string(value: Any, struct: str, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _fail(value, struct, path, "string")
    return value


def decode_int64(value: Any, struct: str, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not INT64_MIN <= value <= INT64_MAX:
        raise _fail(value, struct, path, "int64")
    return value


def decode_bool(value: Any, struct: str, path: str) -> bool:
    if not isinstance(value, bool):
        raise _fail(value, struct, path, "bool")
    return value


def decode_time(value: Any, struct: str, path: str) -> str:
    """``metav1.Time``: an RFC 3339 string (``null`` is handled by the caller)."""
    if not isinstance(value, str):
        raise _fail(value, struct, path, "string")
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        if "T" not in text.upper() or not text[:4].isdigit():
            raise ValueError(value)
        datetime.fromisoformat(text)
    except ValueError:
        raise DecodeError(
            f'parsing time "{value[:64]}" as "2006-01-02T15:04:05Z07:00": cannot parse '
            f"{path} as RFC 3339"
        ) from None
    return value


def decode_string_map(value: Any, struct: str, path: str) -> dict[str, str]:
    """``map[string]string``: a ``null`` value reads as ``""``."""
    if not isinstance(value, dict):
        raise _fail(value, struct, path, "map[string]string")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            raise _fail(key, struct, path, "string")
        out[key] = decode_string(item, struct, path)
    return out


def decode_string_list(value: Any, struct: str, path: str) -> list[str]:
    if not isinstance(value, list):
        raise _fail(value, struct, path, "[]string")
    return [decode_string(item, struct, path) for item in value]


def _decode_struct(
    value: Any,
    struct: str,
    parent: str,
    path: str,
    fields: dict[str, Callable[[Any, str, str], Any]],
) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(value, parent, path, f"v1.{struct}")
    out: dict[str, Any] = {}
    for key, item in value.items():
        decoder = fields.get(key)
        if decoder is None or item is None:
            continue  # an unknown field is dropped; null is the zero value
        out[key] = decoder(item, struct, f"{path}.{key}")
    return out


_OWNER_REFERENCE: dict[str, Callable[[Any, str, str], Any]] = {
    "apiVersion": decode_string,
    "kind": decode_string,
    "name": decode_string,
    "uid": decode_string,
    "controller": decode_bool,
    "blockOwnerDeletion": decode_bool,
}


def _fields_v1(value: Any, struct: str, path: str) -> Any:
    return value  # raw JSON, read (or reset) by the field manager


_MANAGED_FIELDS_ENTRY: dict[str, Callable[[Any, str, str], Any]] = {
    "manager": decode_string,
    "operation": decode_string,
    "apiVersion": decode_string,
    "time": decode_time,
    "fieldsType": decode_string,
    "fieldsV1": _fields_v1,
    "subresource": decode_string,
}


def _list_of(
    fields: dict[str, Callable[[Any, str, str], Any]], type_name: str
) -> Callable[[Any, str, str], list[dict[str, Any]]]:
    def decode(value: Any, struct: str, path: str) -> list[dict[str, Any]]:
        if not isinstance(value, list):
            raise _fail(value, struct, path, f"[]v1.{type_name}")
        return [_decode_struct(item, type_name, struct, path, fields) for item in value]

    return decode


OBJECT_META_FIELDS: Final[dict[str, Callable[[Any, str, str], Any]]] = {
    "name": decode_string,
    "generateName": decode_string,
    "namespace": decode_string,
    "selfLink": decode_string,
    "uid": decode_string,
    "resourceVersion": decode_string,
    "generation": decode_int64,
    "creationTimestamp": decode_time,
    "deletionTimestamp": decode_time,
    "deletionGracePeriodSeconds": decode_int64,
    "labels": decode_string_map,
    "annotations": decode_string_map,
    "ownerReferences": _list_of(_OWNER_REFERENCE, "OwnerReference"),
    "finalizers": decode_string_list,
    "managedFields": _list_of(_MANAGED_FIELDS_ENTRY, "ManagedFieldsEntry"),
}


def decode_object_meta(
    meta: Any, path: str = "metadata", *, keep_unknown: bool = False
) -> dict[str, Any]:
    """``metadata`` as Go decodes it into ``ObjectMeta``: :class:`DecodeError` for a value of
    the wrong type, else a normalised copy (nulls and unknown fields dropped, ``null`` map
    values and list items read as ``""``). ``keep_unknown`` keeps fields ObjectMeta does not
    have (for a caller that reports them itself, as strict decoding does)."""
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise DecodeError(
            f"json: cannot unmarshal {_json_type(meta).split(' ')[0]} into Go struct field "
            f".{path} of type v1.ObjectMeta"
        )
    out: dict[str, Any] = {}
    for key, value in meta.items():
        decoder = OBJECT_META_FIELDS.get(key)
        if decoder is None:
            if keep_unknown:
                out[key] = value
            continue
        if value is not None:
            out[key] = decoder(value, "ObjectMeta", f"{path}.{key}")
    return out


MAX_DEPTH: Final = 100
"""How deep objects may nest (Kubernetes' own objects and CRDs nest about 40 levels). Python
copies and encodes objects recursively, so deeper data could not be served back."""

_LEAVES: Final = frozenset({str, int, bool, type(None)})


def _walk(node: Any, depth: int, max_depth: int) -> bool:
    """True when ``node`` is JSON data at most ``max_depth`` levels deep (recursion is
    bounded by ``max_depth``; exact type checks keep it fast on every write)."""
    if depth > max_depth:
        return False
    kind = type(node)
    if kind is dict:
        for key, value in node.items():
            if type(key) is not str:
                return False
            if type(value) not in _LEAVES and not _walk(value, depth + 1, max_depth):
                return False
        return True
    if kind is list:
        return all(type(v) in _LEAVES or _walk(v, depth + 1, max_depth) for v in node)
    if kind is float:
        return bool(node - node == 0)  # finite: not NaN or an infinity
    return kind in _LEAVES


def _json_problem(value: Any) -> str:
    kind = type(value)
    if kind is float:
        return "" if value - value == 0 else f"{value} is not a JSON number"
    if kind in _LEAVES or kind is list:
        return ""
    if kind is dict:
        bad = next((k for k in value if type(k) is not str), None)
        return "" if bad is None else f"the key {bad!r} is not a string"
    return f"a {kind.__name__} is not JSON data"


def check_json_data(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """:class:`DecodeError` unless ``value`` is plain JSON data (objects with string keys,
    arrays, strings, finite numbers, booleans, null) nested at most ``max_depth`` levels:
    what a YAML body may hold beyond JSON (dates, binary, non-string keys, NaN) is refused
    before it is stored, since it could never be served back as JSON."""
    if _walk(value, 0, max_depth):
        return
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        problem = _json_problem(node)
        if problem or depth > max_depth:
            raise DecodeError(_locate(value, node, problem, max_depth))
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    raise DecodeError("the object is not JSON data")


def _locate(root: Any, culprit: Any, problem: str, max_depth: int) -> str:
    """The message for the first problem found, naming its path (a second, rare walk)."""
    stack: list[tuple[Any, str, int]] = [(root, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > max_depth:
            return f"the object nests more than {max_depth} levels deep (at {path[:200]})"
        if node is culprit and problem:
            return f"{path.lstrip('.') or 'the object'}: {problem}"
        if isinstance(node, dict):
            stack.extend((v, f"{path}.{k}", depth + 1) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(node))
    return problem or f"the object nests more than {max_depth} levels deep"


# --- validation ----------------------------------------------------------------------------------


def validate_labels(labels: dict[str, str], path: str) -> list[FieldError]:
    errors = []
    for key, value in labels.items():
        errors += [FieldError(path, INVALID, m, key) for m in is_qualified_name(key)]
        errors += [FieldError(path, INVALID, m, value) for m in is_valid_label_value(value)]
    return errors


def validate_annotations(annotations: dict[str, str], path: str) -> list[FieldError]:
    errors = []
    for key in annotations:
        # The rule is QualifiedName except that case does not matter.
        errors += [FieldError(path, INVALID, m, key) for m in is_qualified_name(key.lower())]
    size = sum(byte_length(k) + byte_length(v) for k, v in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE:
        errors.append(
            FieldError(path, TOO_LONG, f"may not be more than {TOTAL_ANNOTATION_SIZE} bytes")
        )
    return errors


# Kinds that may never own anything (apimachinery's BannedOwners).
BANNED_OWNERS: Final = frozenset({("v1", "Event")})


def validate_owner_references(refs: list[dict[str, Any]], path: str) -> list[FieldError]:
    """Paths are ``metadata.ownerReferences.uid`` (no index), as Kubernetes reports them."""
    errors: list[FieldError] = []
    first_controller = ""
    for ref in refs:
        api_version, kind = ref.get("apiVersion", ""), ref.get("kind", "")
        version = api_version.rpartition("/")[2] if api_version.count("/") <= 1 else ""
        if not version:
            errors.append(
                FieldError(f"{path}.apiVersion", INVALID, "version must not be empty", api_version)
            )
        if not kind:
            errors.append(FieldError(f"{path}.kind", INVALID, "kind must not be empty", kind))
        for key in ("name", "uid"):
            if not ref.get(key):
                errors.append(
                    FieldError(
                        f"{path}.{key}", INVALID, f"{key} must not be empty", ref.get(key, "")
                    )
                )
        if (api_version, kind) in BANNED_OWNERS:
            errors.append(
                FieldError(
                    path, INVALID, f"/{api_version}, Kind={kind} is disallowed from being an owner"
                )
            )
        if ref.get("controller") is True:
            current = f"{kind}/{ref.get('name', '')}"
            if first_controller:
                errors.append(
                    FieldError(
                        path,
                        INVALID,
                        'Only one reference can have Controller set to true. Found "true" in '
                        f"references for {first_controller} and {current}",
                    )
                )
            else:
                first_controller = current
    return errors


ORPHAN: Final = "orphan"
FOREGROUND: Final = "foregroundDeletion"


def validate_finalizers(finalizers: list[str], path: str) -> list[FieldError]:
    errors = []
    for name in finalizers:
        errors += [FieldError(path, INVALID, m, name) for m in is_qualified_name(name)]
    if ORPHAN in finalizers and FOREGROUND in finalizers:
        errors.append(
            FieldError(
                path,
                INVALID,
                f"finalizer {ORPHAN} and {FOREGROUND} cannot be both set",
                finalizers,
            )
        )
    return errors


def validate_managed_fields(entries: list[dict[str, Any]], path: str) -> list[FieldError]:
    errors = []
    for i, entry in enumerate(entries):
        at = f"{path}[{i}]"
        operation = entry.get("operation", "")
        if operation not in ("Apply", "Update"):
            errors.append(
                FieldError(f"{at}.operation", INVALID, "must be `Apply` or `Update`", operation)
            )
        fields_type = entry.get("fieldsType", "")
        if fields_type and fields_type != "FieldsV1":
            errors.append(
                FieldError(f"{at}.fieldsType", INVALID, "must be `FieldsV1`", fields_type)
            )
        manager = entry.get("manager", "")
        if byte_length(manager) > FIELD_MANAGER_MAX:
            errors.append(
                FieldError(
                    f"{at}.manager", TOO_LONG, f"may not be more than {FIELD_MANAGER_MAX} bytes"
                )
            )
        if byte_length(entry.get("subresource", "")) > SUBRESOURCE_NAME_MAX:
            errors.append(
                FieldError(
                    f"{at}.subresource",
                    TOO_LONG,
                    f"may not be more than {SUBRESOURCE_NAME_MAX} bytes",
                )
            )
    return errors


def validate_object_meta(
    meta: dict[str, Any],
    *,
    namespaced: bool,
    name_rule: NameRule = name_is_dns_subdomain,
    path: str = "metadata",
    require_name: bool = True,
) -> list[FieldError]:
    """``ValidateObjectMetaAccessor`` on decoded metadata (see :func:`decode_object_meta`).

    ``require_name`` False skips "name or generateName is required" (an API server checks the
    name once it has generated one)."""
    errors: list[FieldError] = []
    generate_name = meta.get("generateName", "")
    if generate_name:
        errors += [
            FieldError(f"{path}.generateName", INVALID, m, generate_name)
            for m in name_rule(generate_name, True)
        ]
    name = meta.get("name", "")
    if not name:
        if require_name:
            errors.append(FieldError(f"{path}.name", REQUIRED, "name or generateName is required"))
    else:
        errors += [FieldError(f"{path}.name", INVALID, m, name) for m in name_rule(name, False)]
    namespace = meta.get("namespace", "")
    if namespaced:
        if not namespace:
            if require_name:
                errors.append(FieldError(f"{path}.namespace", REQUIRED, ""))
        else:
            errors += [
                FieldError(f"{path}.namespace", INVALID, m, namespace)
                for m in name_is_dns_label(namespace, False)
            ]
    elif namespace:
        errors.append(FieldError(f"{path}.namespace", FORBIDDEN, "not allowed on this type"))
    generation = meta.get("generation", 0)
    if generation < 0:
        errors.append(FieldError(f"{path}.generation", INVALID, NEGATIVE_MSG, generation))
    errors += validate_labels(meta.get("labels") or {}, f"{path}.labels")
    errors += validate_annotations(meta.get("annotations") or {}, f"{path}.annotations")
    errors += validate_owner_references(
        meta.get("ownerReferences") or [], f"{path}.ownerReferences"
    )
    errors += validate_finalizers(meta.get("finalizers") or [], f"{path}.finalizers")
    errors += validate_managed_fields(meta.get("managedFields") or [], f"{path}.managedFields")
    return errors


def check_object_meta(meta: Any, *, namespaced: bool, name_rule: NameRule) -> list[FieldError]:
    """Both stages for a metadata value read from anywhere (a file, a stored object): a decode
    problem is reported as one Invalid error at ``metadata``."""
    try:
        decoded = decode_object_meta(meta)
    except DecodeError as exc:
        return [FieldError("metadata", INVALID, str(exc))]
    return validate_object_meta(decoded, namespaced=namespaced, name_rule=name_rule)
