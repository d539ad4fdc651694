"""Reading API objects from YAML or JSON, and checking them offline.

Two levels, on purpose:

* :func:`parse_object` turns wire data into a model. It checks types only, keeps every field
  (known or not) and so still parses objects stored under an older schema.
* :func:`check_object` does what a kube-apiserver with our CRDs installed does on create or
  update: prune unknown fields (reported, as ``kubectl --validate=strict`` would reject them),
  apply CRD defaults, then check the structural schema and the CEL rules. It is pure and works
  offline; ``trainer validate`` uses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from trainer.api import constants as c
from trainer.api import crds
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.jobset import contract as jsc
from trainer.jobset.types import JobSet
from trainer.machinery.errors import INVALID, REQUIRED, FieldError, join_path
from trainer.machinery.models.base import K8sModel
from trainer.machinery.openapi import apply_defaults, prune, validate
from trainer.machinery.safeload import FILE_LIMITS, InputError, Limits, load_yaml_documents

UNKNOWN_FIELD = "Unknown field"

MODELS: dict[tuple[str, str], type[K8sModel]] = {
    (c.API_VERSION, c.KIND_TRAINJOB): TrainJob,
    (c.API_VERSION, c.KIND_TRAINING_RUNTIME): TrainingRuntime,
    (c.API_VERSION, c.KIND_CLUSTER_TRAINING_RUNTIME): ClusterTrainingRuntime,
    (jsc.API_VERSION, jsc.KIND): JobSet,
}


class ObjectError(ValueError):
    """An object could not be read; ``errors`` names every offending field."""

    def __init__(self, errors: list[FieldError], source: str = "") -> None:
        self.errors = errors
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(where + "; ".join(str(e) for e in errors))


@dataclass(frozen=True)
class Document:
    """One YAML document of a file."""

    source: str
    index: int
    data: Any

    @property
    def label(self) -> str:
        return f"{self.source}#{self.index}" if self.index else self.source


def load_documents(
    data: str | bytes, source: str = "<stdin>", limits: Limits = FILE_LIMITS
) -> list[Document]:
    """Split a YAML (or JSON) stream into API objects, skipping empty documents.

    Reading is :mod:`trainer.machinery.safeload`'s (UTF-8, bounded size, depth, aliases and
    numbers). A ``kind: List`` is expanded into its items. Raises :class:`InputError` naming
    the source (and the line and column, or the document) for unreadable input and for a
    document or list item that is not a mapping.
    """
    docs: list[Document] = []
    raw = load_yaml_documents(data, source, limits)
    for i, item in enumerate(d for d in raw if d is not None):
        what = f"document {i + 1}"
        _require_object(item, source, what)
        if item.get("kind") == "List" and "items" in item:
            items = item["items"]
            if items is None:
                continue
            if not isinstance(items, list):
                raise InputError(
                    source,
                    f"{what} (kind: List): items must be a list of API objects, "
                    f"not {_type_name(items)}",
                )
            for j, sub in enumerate(items):
                _require_object(sub, source, f"{what} (kind: List), items[{j}]")
                docs.append(Document(source, i, sub))
        else:
            docs.append(Document(source, i, item))
    return docs


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), "a list" if isinstance(value, list) else type(value).__name__
    )


def _require_object(value: Any, source: str, what: str) -> None:
    if not isinstance(value, dict):
        raise InputError(
            source,
            f"{what} is {_type_name(value)}, not an API object (a mapping with apiVersion "
            "and kind)",
        )


def model_for(data: Any) -> type[K8sModel]:
    """The model class for wire data, or :class:`ObjectError` naming apiVersion/kind."""
    if not isinstance(data, Mapping):
        raise ObjectError(
            [FieldError("<document>", INVALID, "must be a mapping (an API object)", data)]
        )
    errors = [
        FieldError(key, REQUIRED, f"every API object needs {key}")
        for key in ("apiVersion", "kind")
        if not data.get(key)
    ]
    if errors:
        raise ObjectError(errors)
    api_version, kind = data["apiVersion"], data["kind"]
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise ObjectError(
            [
                FieldError(k, INVALID, "must be a string", v)
                for k, v in (("apiVersion", api_version), ("kind", kind))
                if not isinstance(v, str)
            ]
        )
    model = MODELS.get((api_version, kind))
    if model is None:
        supported = ", ".join(f"{a} {k}" for a, k in MODELS)
        raise ObjectError(
            [
                FieldError(
                    "kind",
                    INVALID,
                    f"{data['apiVersion']} {data['kind']} is not a kind this tool reads; "
                    f"supported: {supported}",
                    data["kind"],
                )
            ]
        )
    return model


def _loc_path(loc: Iterable[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path = join_path(path, part)
        elif part in ("int", "str", "float", "bool", "function-after", "union"):
            # pydantic names union members in the location; they are not fields.
            continue
        else:
            path = join_path(path, part)
    return path or "<document>"


def pydantic_errors(exc: ValidationError) -> list[FieldError]:
    """Translate pydantic's errors into field errors, one per field."""
    out: dict[str, FieldError] = {}
    for err in exc.errors(include_url=False):
        path = _loc_path(err["loc"])
        if err["type"] == "missing":
            out.setdefault(path, FieldError(path, REQUIRED, ""))
            continue
        message = err["msg"]
        if path in out:
            # A union reports each member; merge them into one message.
            prev = out[path]
            if message not in prev.message:
                message = f"{prev.message}, or {message[0].lower()}{message[1:]}"
            out[path] = FieldError(path, INVALID, message, err.get("input"))
        else:
            out[path] = FieldError(path, INVALID, message, err.get("input"))
    return list(out.values())


def parse_object(data: Any, source: str = "") -> K8sModel:
    """Parse wire data into its model (types only; unknown fields kept)."""
    model = model_for(data)
    try:
        return model.from_wire(data)
    except ValidationError as exc:
        raise ObjectError(pydantic_errors(exc), source) from None


@dataclass
class CheckResult:
    """What the API server would make of an object: the stored form and the errors."""

    kind: str
    name: str
    stored: Any
    errors: list[FieldError] = field(default_factory=list)
    model: K8sModel | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def check_object(data: Any, old: Any = None, *, strict_fields: bool = True) -> CheckResult:
    """Check an object as the API server would on create (or update, when ``old`` is given).

    Unknown fields are errors when ``strict_fields`` (kubectl's default ``--validate=strict``),
    otherwise they are dropped silently, as the API server prunes them.
    """
    try:
        model = model_for(data)
    except ObjectError as exc:
        return CheckResult("", "", data, exc.errors)
    kind = data["kind"]
    meta = data.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    name = name if isinstance(name, str) else ""
    schema = crds.schema_for_kind(kind)
    pruned, unknown = prune(schema, data)
    errors: list[FieldError] = []
    if strict_fields:
        errors.extend(
            FieldError(path, UNKNOWN_FIELD, f'unknown field "{path}"') for path in unknown
        )
    stored = apply_defaults(schema, pruned)
    if old is not None:
        old_pruned, _ = prune(schema, old)
        old_stored = apply_defaults(schema, old_pruned)
        errors.extend(validate(schema, stored, old_stored))
    else:
        errors.extend(validate(schema, stored))
    parsed: K8sModel | None = None
    if not errors:
        try:
            parsed = model.from_wire(stored)
        except ValidationError as exc:
            errors.extend(pydantic_errors(exc))
    return CheckResult(kind, name, stored, errors, parsed)
