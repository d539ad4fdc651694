"""CRD schemas of the Kubernetes types our CRDs embed (pod templates, Job templates, ...).

Upstream's CRDs type every field of the ``corev1.PodTemplateSpec`` / ``batchv1.JobTemplateSpec``
they embed, because controller-gen inlines the Go types of k8s.io/api. We do the same from a
machine-readable description of the Kubernetes API: ``trainer/machinery/kubeschema.json``, generated
by :mod:`trainer.machinery.kubeschema_gen` from the JSON schemas the ``kubernetes-validate`` package
bundles (``make crds``), and committed, so the run time needs no such package. This module
reads that file and inlines its references into the structural schema of one type.

:data:`KUBERNETES_VERSION` is the Kubernetes API the schemas describe: 1.36, the k8s.io/api
minor that Kubeflow Trainer v2.3.0 and JobSet v0.12.0 generate their CRDs from (their pod
templates have exactly the fields of 1.36), so the API server accepts, prunes and merges the
same fields as with upstream's CRDs. It is not the oldest Kubernetes the install supports
(1.31, ``trainer.deploy.render.MIN_KUBERNETES``): as with upstream, a field newer than the
cluster passes the CRD and is dropped by the cluster's Job API (docs/crds.md).

Models name the type a field holds with ``kube_definition`` (a class in
:mod:`trainer.machinery.models.core`) or ``Schema(kube=...)`` (a field typed ``dict[str, Any]``).
"""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from typing import Any, Final

KUBERNETES_VERSION: Final = "1.36"
DATA_FILE: Final = "kubeschema.json"

QUANTITY: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING: Final = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
TIME: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
"""controller-gen's pattern for ``resource.Quantity``."""

ROOTS: Final = (
    "io.k8s.api.batch.v1.JobTemplateSpec",
    "io.k8s.api.core.v1.PersistentVolumeClaim",
)
"""The types whose closure the data file holds: every type a model names is inside it."""


def core_roots() -> tuple[str, ...]:
    return ROOTS


def embedded_meta() -> dict[str, Any]:
    """``metav1.ObjectMeta`` embedded in a template, as controller-gen emits it (with
    ``crd:generateEmbeddedObjectMeta=true``): the five fields a template may set."""
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        "type": "object",
        "properties": {
            "annotations": copy.deepcopy(string_map),
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "labels": copy.deepcopy(string_map),
            "name": {"type": "string"},
            "namespace": {"type": "string"},
        },
    }


def _special(name: str) -> dict[str, Any] | None:
    if name == QUANTITY:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": True,
        }
    if name == INT_OR_STRING:
        return {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
        }
    if name == TIME:
        return {"type": "string", "format": "date-time"}
    if name == OBJECT_META:
        return embedded_meta()
    return None


class UnknownKubeType(KeyError):
    """A model names a Kubernetes type the data file does not hold."""


@functools.cache
def _definitions() -> dict[str, Any]:
    text = (resources.files("trainer.machinery") / DATA_FILE).read_text(encoding="utf-8")
    data = json.loads(text)
    defs: dict[str, Any] = data["definitions"]
    return defs


def clear_cache() -> None:
    """Forget the loaded data file and resolved schemas (after ``make crds`` rewrote it)."""
    _definitions.cache_clear()
    _resolved.cache_clear()


@functools.cache
def _resolved(name: str) -> dict[str, Any]:
    special = _special(name)
    if special is not None:
        return special
    defs = _definitions()
    if name not in defs:
        raise UnknownKubeType(f"{name} is not in trainer/machinery/{DATA_FILE}; add it to ROOTS")
    return _inline(defs[name], (name,))


def _inline(node: dict[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
    if "$ref" in node:
        name = node["$ref"]
        if name in stack:
            raise ValueError(f"recursive Kubernetes type {' -> '.join((*stack, name))}")
        target = _special(name)
        if target is None:
            defs = _definitions()
            if name not in defs:
                raise UnknownKubeType(f"{name} is not in trainer/machinery/{DATA_FILE}")
            target = _inline(defs[name], (*stack, name))
        out: dict[str, Any] = {}
        description = node.get("description", target.get("description"))
        if description:
            out["description"] = description
        out.update((k, v) for k, v in target.items() if k != "description")
        return out
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {p: _inline(s, stack) for p, s in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _inline(value, stack)
        else:
            out[key] = copy.deepcopy(value)
    return out


def kube_schema(name: str) -> dict[str, Any]:
    """The structural CRD schema of a Kubernetes type (``io.k8s.api.core.v1.Container``), with
    every field, description, required list, list and map type, format and default; a fresh
    copy the caller may change."""
    return copy.deepcopy(_resolved(name))
