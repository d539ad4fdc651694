"""The base of every API model, and the schema markers the CRD generator reads.

Two promises shape this module:

* **Lossless round trip.** Every model allows extra fields, parsing keeps them verbatim, and
  :meth:`K8sModel.to_wire` dumps only what was set, under the wire (camelCase) names. Loading
  any object and dumping it gives back equal data, including fields we never model (probes,
  affinity, every volume source, fields a future Kubernetes adds).
* **One source of truth for the schema.** Validation rules (minimum, enum, maxLength, CEL, list
  types, defaults) are attached to fields with :class:`Schema` markers inside ``Annotated``.
  Parsing only checks *types* (strictly: ``"3"`` is not an integer), so objects stored under an
  older schema still load; the rules themselves are emitted into the generated CRDs and checked
  offline by :mod:`trainer.machinery.openapi` against those CRDs, exactly as a kube-apiserver would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


@dataclass(frozen=True)
class Rule:
    """One ``x-kubernetes-validations`` entry."""

    rule: str
    message: str = ""
    field_path: str = ""
    reason: str = ""

    def to_schema(self) -> dict[str, str]:
        out = {"rule": self.rule}
        if self.message:
            out["message"] = self.message
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out


IMMUTABLE = Rule("self == oldSelf", "field is immutable")


@dataclass(frozen=True, eq=False)
class Schema:
    """OpenAPI v3 facts about one field that the Python type alone does not say.

    ``type`` and ``format`` override what the generator infers from the annotation: a field
    that must still *parse* an older schema's value (an int-or-string that became an int) keeps
    the wide Python type while the CRD states today's type.
    """

    type: str | None = None
    format: str | None = None
    description: str | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    min_length: int | None = None
    max_length: int | None = None
    min_items: int | None = None
    max_items: int | None = None
    min_properties: int | None = None
    pattern: str | None = None
    enum: tuple[Any, ...] | None = None
    default: Any = None
    list_type: str | None = None  # atomic | set | map
    list_map_keys: tuple[str, ...] | None = None
    map_type: str | None = None  # atomic | granular
    rules: tuple[Rule, ...] = ()
    item_rules: tuple[Rule, ...] = ()
    item_max_length: int | None = None
    item_min_length: int | None = None
    item_enum: tuple[Any, ...] | None = None
    int_or_string: bool = False
    preserve_unknown: bool = False
    embedded_resource: bool = False
    required: bool = False
    kube: str | None = None
    """The Kubernetes type the field holds (``io.k8s.api.core.v1.Affinity``): the CRD gets that
    type's full schema (:mod:`trainer.machinery.kubeschema`), the other markers apply on top."""
    extra: Mapping[str, Any] = field(default_factory=dict)


class K8sModel(BaseModel):
    """Base of every API object and sub-object.

    Subclasses may set ``crd_rules`` (object-level CEL rules), ``crd_min_properties``,
    ``crd_preserve_unknown`` (keep unknown fields in the CRD) and ``kube_definition`` (the class
    models part of a Kubernetes type: the CRD gets that type's full schema, see
    :mod:`trainer.machinery.kubeschema`).
    """

    model_config = ConfigDict(
        extra="allow",
        strict=True,
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
    )

    crd_rules: ClassVar[tuple[Rule, ...]] = ()
    crd_min_properties: ClassVar[int | None] = None
    crd_preserve_unknown: ClassVar[bool] = False
    kube_definition: ClassVar[str | None] = None

    def to_wire(self) -> dict[str, Any]:
        """The object as JSON-ready data with wire names, holding exactly what was set."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Self:
        """Parse wire data (strict types, unknown fields kept)."""
        return cls.model_validate(data)

    def extras(self) -> dict[str, Any]:
        """Fields present on the wire that this model does not declare."""
        return dict(self.__pydantic_extra__ or {})


class TopLevel(K8sModel):
    """An API object: apiVersion and kind are always written, even when defaulted."""

    def to_wire(self) -> dict[str, Any]:
        data = super().to_wire()
        fields = type(self).model_fields
        head = {
            "apiVersion": data.pop("apiVersion", fields["api_version"].default),
            "kind": data.pop("kind", fields["kind"].default),
        }
        return {**head, **data}
