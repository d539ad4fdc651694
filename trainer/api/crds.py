"""Generate CustomResourceDefinitions from the API models.

The models are the single source of truth: their Python types give the structural schema and
their :class:`~trainer.machinery.models.base.Schema` markers give the validation rules,
defaults and list types; a field holding a Kubernetes type (a pod template, a container, ...)
gets that type's full schema from :mod:`trainer.machinery.kubeschema`. ``python -m
trainer.api.crds`` first regenerates ``trainer/machinery/kubeschema.json``
(:mod:`trainer.machinery.kubeschema_gen`, from the ``kubernetes-validate`` package), then writes
``manifests/base/crds/`` (the Trainer CRDs) and ``manifests/local/`` (a JobSet CRD for the
embedded control plane); ``--check`` fails when the committed files differ from what the
sources generate.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from trainer.api import constants as c
from trainer.api import v1alpha1 as v1
from trainer.jobset import contract as jsc
from trainer.jobset import types as js
from trainer.machinery import kubeschema, kubeschema_gen, yamlout
from trainer.machinery.kubeschema import embedded_meta, kube_schema
from trainer.machinery.models.base import K8sModel, Schema
from trainer.machinery.models.core import ObjectMeta

GENERATED_BY = "trainer.kubeflow.org/generated-by"
GENERATOR = "python -m trainer.api.crds"

_SCALARS: dict[type, str] = {str: "string", bool: "boolean", int: "integer", float: "number"}


def _merge(markers: list[Schema]) -> Schema | None:
    """Later markers (outer annotations) win field by field over earlier (inner) ones."""
    if not markers:
        return None
    out: dict[str, Any] = {}
    for m in markers:
        for name in Schema.__dataclass_fields__:
            value = getattr(m, name)
            default = Schema.__dataclass_fields__[name].default
            if name == "extra":
                out.setdefault("extra", {}).update(value)
            elif name == "rules":
                out["rules"] = (*out.get("rules", ()), *value)
            elif value is not None and value != default:
                out[name] = value
    return Schema(**out)


def _unwrap(tp: Any) -> tuple[Any, list[Schema]]:
    """Strip Optional and Annotated layers, collecting Schema markers (inner first)."""
    markers: list[Schema] = []
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            args = get_args(tp)
            inner, meta = args[0], args[1:]
            tp, inner_markers = _unwrap(inner)
            markers = inner_markers + [m for m in meta if isinstance(m, Schema)] + markers
            continue
        if origin in (Union, types.UnionType):
            members = [a for a in get_args(tp) if a is not type(None)]
            if len(members) == 1:
                tp = members[0]
                continue
            # A genuine union (int | str, int | float | str): report its members.
            flat: list[Any] = []
            for a in members:
                inner, ms = _unwrap(a)
                markers = ms + markers
                flat.append(inner)
            return tuple(flat), markers
        return tp, markers


def _description(text: str | None) -> str | None:
    if not text:
        return None
    return " ".join(text.split())


class Generator:
    """Turns a model class into an openAPIV3Schema."""

    def schema_for_type(self, tp: Any, marker: Schema | None) -> dict[str, Any]:
        node: dict[str, Any] = {}
        if marker is not None and marker.kube:
            node = kube_schema(marker.kube)
        elif isinstance(tp, type) and issubclass(tp, K8sModel) and tp.kube_definition:
            node = kube_schema(tp.kube_definition)
        elif marker is not None and marker.int_or_string:
            node = {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "x-kubernetes-int-or-string": True,
            }
        elif marker is not None and marker.type:
            node = {"type": marker.type}
        elif isinstance(tp, tuple):
            raise TypeError(f"union {tp} needs a Schema(type=...) or int_or_string marker")
        elif tp is Any:
            node = {"x-kubernetes-preserve-unknown-fields": True}
        elif isinstance(tp, type) and issubclass(tp, BaseModel):
            node = self.model_schema(tp)
        elif tp in _SCALARS:
            node = {"type": _SCALARS[tp]}
        else:
            origin = get_origin(tp)
            args = get_args(tp)
            if origin is list:
                item_tp, item_markers = _unwrap(args[0])
                items = self.schema_for_type(item_tp, _merge(item_markers))
                if marker is not None:
                    self._apply_item_marker(items, marker)
                node = {"type": "array", "items": items}
            elif origin is dict:
                value_tp, value_markers = _unwrap(args[1])
                if value_tp is Any:
                    node = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                else:
                    node = {
                        "type": "object",
                        "additionalProperties": self.schema_for_type(
                            value_tp, _merge(value_markers)
                        ),
                    }
            else:
                raise TypeError(f"no schema for type {tp!r}")
        if marker is not None:
            self._apply_marker(node, marker)
        return node

    @staticmethod
    def _apply_item_marker(items: dict[str, Any], marker: Schema) -> None:
        if marker.item_max_length is not None:
            items["maxLength"] = marker.item_max_length
        if marker.item_min_length is not None:
            items["minLength"] = marker.item_min_length
        if marker.item_enum is not None:
            items["enum"] = list(marker.item_enum)
        if marker.item_rules:
            items.setdefault("x-kubernetes-validations", []).extend(
                r.to_schema() for r in marker.item_rules
            )

    @staticmethod
    def _apply_marker(node: dict[str, Any], m: Schema) -> None:
        if m.format:
            node["format"] = m.format
        for key, value in (
            ("enum", list(m.enum) if m.enum is not None else None),
            ("minimum", m.minimum),
            ("maximum", m.maximum),
            ("minLength", m.min_length),
            ("maxLength", m.max_length),
            ("minItems", m.min_items),
            ("maxItems", m.max_items),
            ("minProperties", m.min_properties),
            ("pattern", m.pattern),
            ("x-kubernetes-list-type", m.list_type),
            ("x-kubernetes-map-type", m.map_type),
        ):
            if value is not None:
                node[key] = value
        if m.list_map_keys:
            node["x-kubernetes-list-map-keys"] = list(m.list_map_keys)
        if m.preserve_unknown:
            node["x-kubernetes-preserve-unknown-fields"] = True
        if m.embedded_resource:
            node["x-kubernetes-embedded-resource"] = True
        if m.rules:
            node.setdefault("x-kubernetes-validations", []).extend(r.to_schema() for r in m.rules)
        node.update(m.extra)

    def field_schema(self, info: FieldInfo) -> dict[str, Any]:
        tp, markers = _unwrap(info.annotation)
        markers += [m for m in info.metadata if isinstance(m, Schema)]
        marker = _merge(markers)
        node = self.embedded_meta() if tp is ObjectMeta else self.schema_for_type(tp, marker)
        # A Kubernetes type's schema (kubeschema) comes with its own description.
        kube_description = node.pop("description", None)
        description = _description(info.description) or kube_description
        if description is None and isinstance(tp, type) and issubclass(tp, BaseModel):
            description = _description(tp.__doc__)
        if (
            not info.is_required()
            and info.default is not None
            and isinstance(info.default, str | int | float | bool)
        ):
            node["default"] = info.default
        ordered: dict[str, Any] = {}
        if description:
            ordered["description"] = description
        ordered.update(node)
        return ordered

    @staticmethod
    def embedded_meta() -> dict[str, Any]:
        return embedded_meta()

    def model_schema(self, cls: type[BaseModel]) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required: list[str] = []
        for name, info in cls.model_fields.items():
            wire = info.serialization_alias or info.alias or name
            properties[wire] = self.field_schema(info)
            markers = [m for m in info.metadata if isinstance(m, Schema)]
            if info.is_required() or any(m.required for m in markers):
                required.append(wire)
        node: dict[str, Any] = {"type": "object"}
        if properties:
            node["properties"] = properties
        if required:
            node["required"] = required
        if issubclass(cls, K8sModel):
            if cls.crd_preserve_unknown:
                node["x-kubernetes-preserve-unknown-fields"] = True
            if cls.crd_min_properties is not None:
                node["minProperties"] = cls.crd_min_properties
            if cls.crd_rules:
                node["x-kubernetes-validations"] = [r.to_schema() for r in cls.crd_rules]
        return node

    def root_schema(self, cls: type[BaseModel]) -> dict[str, Any]:
        node = self.model_schema(cls)
        props = node["properties"]
        props["apiVersion"] = {
            "description": "APIVersion defines the versioned schema of this representation "
            "of an object.",
            "type": "string",
        }
        props["kind"] = {
            "description": "Kind is a string value representing the REST resource this "
            "object represents.",
            "type": "string",
        }
        props["metadata"] = {"type": "object"}
        node.pop("required", None)
        out: dict[str, Any] = {}
        doc = _description(cls.__doc__)
        if doc:
            out["description"] = doc
        out.update(node)
        return out


def _crd(
    *,
    group: str,
    kind: str,
    plural: str,
    scope: str,
    version: str,
    model: type[BaseModel],
    status: bool,
    columns: list[dict[str, Any]],
    short_names: list[str] | None = None,
    categories: list[str] | None = None,
) -> dict[str, Any]:
    names: dict[str, Any] = {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
    }
    if short_names:
        names["shortNames"] = short_names
    if categories:
        names["categories"] = categories
    ver: dict[str, Any] = {"name": version, "served": True, "storage": True}
    if columns:
        ver["additionalPrinterColumns"] = columns
    ver["schema"] = {"openAPIV3Schema": Generator().root_schema(model)}
    if status:
        ver["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "annotations": {GENERATED_BY: GENERATOR},
        },
        "spec": {"group": group, "names": names, "scope": scope, "versions": [ver]},
    }


AGE_COLUMN = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}

TRAINJOB_COLUMNS = [
    {
        "name": "State",
        "type": "string",
        "description": "The current state: Pending, Running, Suspended, Complete or Failed",
        "jsonPath": ".status.state",
    },
    {
        "name": "Runtime",
        "type": "string",
        "description": "The runtime the TrainJob runs on",
        "jsonPath": ".spec.runtimeRef.name",
    },
    {
        "name": "Nodes",
        "type": "integer",
        "description": "Training nodes requested by the TrainJob (the runtime's when empty)",
        "jsonPath": ".spec.trainer.numNodes",
    },
    AGE_COLUMN,
]


def trainjob_crd() -> dict[str, Any]:
    return _crd(
        group=c.GROUP,
        kind=c.KIND_TRAINJOB,
        plural=c.PLURAL_TRAINJOBS,
        scope="Namespaced",
        version=c.VERSION,
        model=v1.TrainJob,
        status=True,
        columns=TRAINJOB_COLUMNS,
    )


def training_runtime_crd() -> dict[str, Any]:
    return _crd(
        group=c.GROUP,
        kind=c.KIND_TRAINING_RUNTIME,
        plural=c.PLURAL_TRAINING_RUNTIMES,
        scope="Namespaced",
        version=c.VERSION,
        model=v1.TrainingRuntime,
        status=False,
        columns=[AGE_COLUMN],
    )


def cluster_training_runtime_crd() -> dict[str, Any]:
    return _crd(
        group=c.GROUP,
        kind=c.KIND_CLUSTER_TRAINING_RUNTIME,
        plural=c.PLURAL_CLUSTER_TRAINING_RUNTIMES,
        scope="Cluster",
        version=c.VERSION,
        model=v1.ClusterTrainingRuntime,
        status=False,
        columns=[AGE_COLUMN],
    )


def jobset_crd() -> dict[str, Any]:
    return _crd(
        group=jsc.GROUP,
        kind=jsc.KIND,
        plural=jsc.PLURAL,
        scope="Namespaced",
        version=jsc.VERSION,
        model=js.JobSet,
        status=True,
        columns=[
            {
                "name": "TerminalState",
                "type": "string",
                "description": "Final state of JobSet",
                "jsonPath": ".status.terminalState",
            },
            {
                "name": "Restarts",
                "type": "string",
                "description": "Number of restarts",
                "jsonPath": ".status.restarts",
            },
            {
                "name": "Completed",
                "type": "string",
                "jsonPath": f'.status.conditions[?(@.type=="{jsc.COMPLETED}")].status',
            },
            {
                "name": "Suspended",
                "type": "string",
                "description": "JobSet suspended",
                "jsonPath": ".spec.suspend",
            },
            {**AGE_COLUMN, "description": "Time this JobSet was created"},
        ],
    )


def trainer_crds() -> list[dict[str, Any]]:
    """The three Trainer CRDs, in install order."""
    return [cluster_training_runtime_crd(), training_runtime_crd(), trainjob_crd()]


def crd_schema(crd: dict[str, Any]) -> dict[str, Any]:
    """The openAPIV3Schema of a single-version CRD."""
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


@functools.cache
def _schemas() -> dict[str, dict[str, Any]]:
    crds = [*trainer_crds(), jobset_crd()]
    return {crd["spec"]["names"]["kind"]: crd_schema(crd) for crd in crds}


def schema_for_kind(kind: str) -> dict[str, Any]:
    """The openAPIV3Schema of a Trainer or JobSet kind (built once; do not mutate)."""
    return _schemas()[kind]


HEADER = (
    "# Generated by `python -m trainer.api.crds` from the models in trainer/api; do not edit.\n"
)


def to_yaml(obj: Any) -> str:
    return HEADER + yamlout.dump(obj, allow_unicode=True)


def _generated() -> list[tuple[str, dict[str, Any]]]:
    """(relative path, object) of every generated file."""
    out: list[tuple[str, dict[str, Any]]] = []
    for crd in trainer_crds():
        fname = f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml"
        out.append((f"manifests/base/crds/{fname}", crd))
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [rel.rsplit("/", 1)[1] for rel, _ in out],
    }
    out.append(("manifests/base/crds/kustomization.yaml", kustomization))
    out.append((f"manifests/local/{jsc.GROUP}_{jsc.PLURAL}.yaml", jobset_crd()))
    return out


def generated_paths() -> list[str]:
    """The relative path of every generated file (without writing any YAML)."""
    return [rel for rel, _ in _generated()]


@functools.cache
def _rendered() -> tuple[tuple[str, str], ...]:
    # The files are a pure function of the models; writing ~40k lines of YAML takes seconds,
    # and `--check`, `make crds` and the tests ask for them more than once per process.
    return tuple((rel, to_yaml(obj)) for rel, obj in _generated())


def rendered_files() -> Iterator[tuple[str, str]]:
    """(relative path, content) of every generated file."""
    yield from _rendered()


def sync_file(root: Path, rel: str, content: str, check: bool) -> bool:
    """Make ``root/rel`` hold ``content`` (printing "wrote ..."), or with ``check`` print the
    unified diff instead. Returns whether the file was stale."""
    path = root / rel
    current = path.read_text() if path.exists() else ""
    if current == content:
        return False
    if check:
        sys.stdout.writelines(
            difflib.unified_diff(
                current.splitlines(keepends=True),
                content.splitlines(keepends=True),
                f"a/{rel}",
                f"b/{rel}",
            )
        )
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        print(f"wrote {rel}")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.api.crds", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="project root")
    parser.add_argument(
        "--check", action="store_true", help="fail if the files differ from the models"
    )
    args = parser.parse_args(argv)
    stale: list[str] = []
    # The Kubernetes types' schemas come from kubernetes-validate's bundle (read only here)
    # into trainer/machinery/kubeschema.json, which the CRDs below are built from.
    try:
        text = kubeschema_gen.render()
    except kubeschema_gen.SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if sync_file(args.root, kubeschema_gen.RELATIVE_PATH, text, args.check):
        stale.append(kubeschema_gen.RELATIVE_PATH)
        if not args.check:
            kubeschema.clear_cache()
            _schemas.cache_clear()
    stale += [
        rel for rel, content in rendered_files() if sync_file(args.root, rel, content, args.check)
    ]
    if stale and args.check:
        print(
            f"\n{len(stale)} generated file(s) are stale; run `python -m trainer.api.crds`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
