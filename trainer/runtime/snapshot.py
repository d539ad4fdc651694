"""The runtime snapshot ConfigMap ``<trainjob>-runtime-snapshot`` (docs/design.md, "One
reconcile").

On its first reconcile a TrainJob's runtime is copied into this ConfigMap (data key
``runtime``: the runtime object as YAML); later reconciles build from the snapshot, so edits
to the runtime never reach existing TrainJobs. Reading a snapshot back applies upstream's
validity checks, each an error prefixed ``invalid runtime snapshot:``.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from typing import Any

import yaml

from trainer.api import constants as c
from trainer.api.load import ObjectError, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.machinery.safeload import InputError, load_yaml
from trainer.runtime.info import BuildError, Runtime
from trainer.runtime.objects import object_meta

PREFIX = "invalid runtime snapshot: "

# libyaml's emitter when PyYAML was built with it (it is ~10x faster); same output.
_Dumper: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@functools.lru_cache(maxsize=64)
def _document(text: str) -> Any:
    """The snapshot's YAML parsed: every reconcile reads it, and the TrainJobs of one runtime
    hold the same text, so it is parsed once (copied for each reader, who may change it)."""
    return load_yaml(text, "the runtime snapshot")


def snapshot_name(trainjob_name: str) -> str:
    return f"{trainjob_name}{c.RUNTIME_SNAPSHOT_SUFFIX}"


def runtime_document(runtime: Runtime) -> dict[str, Any]:
    """The runtime as stored in the snapshot: the whole object without managedFields."""
    data = runtime.to_wire()
    meta = dict(data.get("metadata") or {})
    meta.pop("managedFields", None)
    data["metadata"] = meta
    return data


def build_snapshot(trainjob: TrainJob, runtime: Runtime) -> dict[str, Any]:
    """The snapshot ConfigMap for ``trainjob`` (owned by it, controller + blockOwnerDeletion)."""
    name = (trainjob.metadata.name if trainjob.metadata else None) or ""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(trainjob, snapshot_name(name)),
        "data": {
            c.RUNTIME_SNAPSHOT_KEY: yaml.dump(
                runtime_document(runtime), Dumper=_Dumper, sort_keys=False, width=100
            )
        },
    }


def read_snapshot(trainjob: TrainJob, config_map: Mapping[str, Any]) -> Runtime:
    """The runtime stored in ``config_map``, after upstream's checks; :class:`BuildError`
    with an ``invalid runtime snapshot:`` message otherwise."""
    uid = trainjob.metadata.uid if trainjob.metadata else None
    owners = (config_map.get("metadata") or {}).get("ownerReferences") or []
    controller = next((o for o in owners if o.get("controller")), None)
    if controller is None or controller.get("uid") != uid:
        raise BuildError(PREFIX + "the snapshot ConfigMap is owned by another object")
    data = config_map.get("data") or {}
    if c.RUNTIME_SNAPSHOT_KEY not in data:
        raise BuildError(PREFIX + f'snapshot ConfigMap missing "{c.RUNTIME_SNAPSHOT_KEY}" data key')
    try:
        text = data[c.RUNTIME_SNAPSHOT_KEY]
        if not isinstance(text, str):
            raise InputError("the runtime snapshot", "not a string")
        doc = copy.deepcopy(_document(text))
        runtime = parse_object(doc)
    except (InputError, ObjectError) as exc:
        raise BuildError(PREFIX + f"cannot decode the runtime: {exc}") from None
    if not isinstance(runtime, TrainingRuntime | ClusterTrainingRuntime):
        raise BuildError(PREFIX + f"the snapshot holds a {doc.get('kind')}, not a runtime")
    ref = trainjob.spec.runtime_ref if trainjob.spec else None
    got = (runtime.metadata.name if runtime.metadata else None, runtime.kind)
    want = (ref.name, ref.kind) if ref else (None, None)
    group = runtime.api_version.split("/")[0]
    if ref is None or got != want or group != ref.api_group:
        raise BuildError(
            PREFIX + f"the snapshot refers to the wrong runtime: {got[1]} {got[0]!r} "
            f"(group {group}), but the TrainJob references {want[1]} {want[0]!r}"
        )
    return runtime
