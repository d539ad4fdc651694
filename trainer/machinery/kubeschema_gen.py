"""Generate ``trainer/machinery/kubeschema.json``: the Kubernetes types our CRDs embed, as CRD
schemas.

Run by ``python -m trainer.api.crds`` (``make crds``); never at run time. The source is the
JSON schema of the Kubernetes API that the ``kubernetes-validate`` package bundles per
Kubernetes version (``kubernetes-json-schema/v1.36.0-local/_definitions.json``: generated from
Kubernetes' own OpenAPI document, with descriptions, ``required``, list and map types and
formats). Every definition reachable from the roots our models name (``kube_definition`` in
:mod:`trainer.machinery.models.core`, ``Schema(kube=...)``) is turned into the structural schema
fragment controller-gen emits for the same Go type (https://book.kubebuilder.io/reference/markers/crd):

* ``type: [object, "null"]`` becomes ``type: object`` (a CRD schema states one type);
* ``resource.Quantity`` becomes ``anyOf`` integer/string with the quantity ``pattern`` and
  ``x-kubernetes-int-or-string``; ``intstr.IntOrString`` the same without the pattern;
  ``metav1.Time`` a ``date-time`` string; an embedded ``metav1.ObjectMeta`` the five fields
  controller-gen keeps for embedded metadata (:func:`trainer.machinery.kubeschema.embedded_meta`);
* ``x-kubernetes-patch-*``, ``x-kubernetes-unions``, GVK and ``enum`` annotations are dropped,
  as controller-gen does not emit them for these types;
* the ``+default`` markers of the Go types, which the bundled JSON schema leaves out, are added
  from :data:`DEFAULTS`.

Other definitions stay references by name (``{"$ref": NAME}``), resolved by
:mod:`trainer.machinery.kubeschema` when the CRDs are built, so the file holds each type once.
An unexpected keyword in the source fails the generation instead of being dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from typing import Any, Final

from trainer.machinery.kubeschema import (
    DATA_FILE,
    INT_OR_STRING,
    KUBERNETES_VERSION,
    OBJECT_META,
    QUANTITY,
    TIME,
    core_roots,
)

BUNDLE = f"v{KUBERNETES_VERSION}.0-local/_definitions.json"
"""The file of the ``kubernetes-validate`` package read (under ``kubernetes-json-schema/``)."""

# The +default markers of k8s.io/api v0.36 (core/v1/types.go) on the types our CRDs embed.
# openapi-gen puts them in Kubernetes' OpenAPI v3 document, controller-gen in CRDs, but the
# JSON schema bundle drops every default, so they are restated here: (definition, field) ->
# default.
DEFAULTS: Final[dict[tuple[str, str], Any]] = {
    ("io.k8s.api.core.v1.LocalObjectReference", "name"): "",
    ("io.k8s.api.core.v1.ContainerPort", "protocol"): "TCP",
    ("io.k8s.api.core.v1.GRPCAction", "service"): "",
    ("io.k8s.api.core.v1.FileKeySelector", "optional"): False,
    ("io.k8s.api.core.v1.AzureDiskVolumeSource", "fsType"): "ext4",
    ("io.k8s.api.core.v1.AzureDiskVolumeSource", "readOnly"): False,
    ("io.k8s.api.core.v1.ISCSIVolumeSource", "iscsiInterface"): "default",
    ("io.k8s.api.core.v1.RBDVolumeSource", "keyring"): "/etc/ceph/keyring",
    ("io.k8s.api.core.v1.RBDVolumeSource", "pool"): "rbd",
    ("io.k8s.api.core.v1.RBDVolumeSource", "user"): "admin",
    ("io.k8s.api.core.v1.ScaleIOVolumeSource", "fsType"): "xfs",
    ("io.k8s.api.core.v1.ScaleIOVolumeSource", "storageMode"): "ThinProvisioned",
}

LOCAL_OBJECT_REFERENCE: Final = "io.k8s.api.core.v1.LocalObjectReference"

# The Go types that embed LocalObjectReference (``LocalObjectReference `json:",inline"```).
# OpenAPI flattens the embedded ``name`` into them but keeps neither its default nor the
# ``+structType=atomic`` of LocalObjectReference; controller-gen keeps both.
EMBED_LOCAL_OBJECT_REFERENCE: Final = (
    "io.k8s.api.core.v1.ConfigMapKeySelector",
    "io.k8s.api.core.v1.SecretKeySelector",
    "io.k8s.api.core.v1.ConfigMapEnvSource",
    "io.k8s.api.core.v1.SecretEnvSource",
    "io.k8s.api.core.v1.ConfigMapVolumeSource",
    "io.k8s.api.core.v1.ConfigMapProjection",
    "io.k8s.api.core.v1.SecretProjection",
)

_KEPT: Final = frozenset(
    {
        "description",
        "format",
        "required",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
    }
)
_DROPPED: Final = frozenset(
    {
        "x-kubernetes-patch-strategy",
        "x-kubernetes-patch-merge-key",
        "x-kubernetes-unions",
        "x-kubernetes-group-version-kind",
        "enum",
    }
)
_SPECIAL: Final = frozenset({QUANTITY, INT_OR_STRING, TIME, OBJECT_META})
_REF_PREFIX: Final = "#/$defs/"


class SourceError(ValueError):
    """The bundled schema holds something this converter does not know how to translate."""


def load_bundle() -> dict[str, Any]:
    """The ``$defs`` of the bundled JSON schema for :data:`KUBERNETES_VERSION`."""
    try:
        root = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    except ModuleNotFoundError as exc:
        raise SourceError(
            "generating the CRDs needs the kubernetes-validate package (pip install -e '.[dev]')"
        ) from exc
    path = root / BUNDLE
    if not path.is_file():
        raise SourceError(f"kubernetes-validate has no {BUNDLE}: install kubernetes-validate>=1.36")
    defs: dict[str, Any] = json.loads(path.read_text())["$defs"]
    return defs


def _ref_name(ref: str) -> str:
    if not ref.startswith(_REF_PREFIX):
        raise SourceError(f"unexpected $ref {ref!r}")
    return ref[len(_REF_PREFIX) :]


def _single_type(value: Any, where: str) -> str:
    types = [value] if isinstance(value, str) else [t for t in value if t != "null"]
    if len(types) != 1 or not isinstance(types[0], str):
        raise SourceError(f"{where}: cannot state type {value!r} in a structural schema")
    return types[0]


class Converter:
    """Converts the definitions reachable from some roots, remembering which it reached."""

    def __init__(self, defs: dict[str, Any]) -> None:
        self.defs = defs
        self.out: dict[str, Any] = {}
        self._pending: list[str] = []

    def run(self, roots: Iterable[str]) -> dict[str, Any]:
        self._pending.extend(roots)
        while self._pending:
            name = self._pending.pop()
            if name in self.out:
                continue
            if name not in self.defs:
                raise SourceError(f"{BUNDLE} has no definition {name}")
            self.out[name] = self.node(self.defs[name], name)
        for (definition, field), value in DEFAULTS.items():
            self._property(definition, field)["default"] = value
        embedded = self.out[LOCAL_OBJECT_REFERENCE]
        for definition in EMBED_LOCAL_OBJECT_REFERENCE:
            self._property(definition, "name")["default"] = embedded["properties"]["name"][
                "default"
            ]
            self.out[definition]["x-kubernetes-map-type"] = embedded["x-kubernetes-map-type"]
        return dict(sorted(self.out.items()))

    def _property(self, definition: str, field: str) -> dict[str, Any]:
        props = self.out.get(definition, {}).get("properties", {})
        if field not in props:
            raise SourceError(f"{definition}.{field} is not in the generated closure")
        node: dict[str, Any] = props[field]
        return node

    def node(self, src: dict[str, Any], where: str) -> dict[str, Any]:
        if "$ref" in src:
            name = _ref_name(src["$ref"])
            extra = set(src) - {"$ref", "description"}
            if extra:
                raise SourceError(f"{where}: unexpected keys beside $ref: {sorted(extra)}")
            if name not in _SPECIAL:
                self._pending.append(name)
            out: dict[str, Any] = {"$ref": name}
            if "description" in src:
                out["description"] = src["description"]
            return out
        out = {}
        for key, value in src.items():
            if key in _DROPPED:
                continue
            if key == "type":
                out["type"] = _single_type(value, where)
            elif key == "properties":
                out["properties"] = {
                    p: self.node(s, f"{where}.{p}") for p, s in sorted(value.items())
                }
            elif key == "items":
                out["items"] = self.node(value, f"{where}[]")
            elif key == "additionalProperties":
                if not isinstance(value, dict):
                    raise SourceError(f"{where}: additionalProperties {value!r}")
                out["additionalProperties"] = self.node(value, f"{where}{{}}")
            elif key == "required":
                out["required"] = sorted(value)
            elif key in _KEPT:
                out[key] = value
            else:
                raise SourceError(f"{where}: unexpected keyword {key!r}")
        return out


def generate(defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The content of :data:`DATA_FILE`."""
    defs = load_bundle() if defs is None else defs
    return {
        "kubernetes": KUBERNETES_VERSION,
        "source": f"kubernetes-validate: kubernetes-json-schema/{BUNDLE}",
        "generatedBy": "python -m trainer.api.crds",
        "definitions": Converter(defs).run(core_roots()),
    }


def render(defs: dict[str, Any] | None = None) -> str:
    """:func:`generate` as the committed JSON text."""
    return json.dumps(generate(defs), indent=1, sort_keys=False, ensure_ascii=False) + "\n"


RELATIVE_PATH: Final = f"trainer/machinery/{DATA_FILE}"
