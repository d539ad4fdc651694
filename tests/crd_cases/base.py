"""The cases' shape and builders: :class:`Case`, the TrainJob and runtime they start from."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# The API server's answers: a dry-run create, a dry-run update, a refusal of a value, one of a
# body that does not decode (fieldValidation=Strict and an unknown field).
CREATED, UPDATED, INVALID, BAD_REQUEST = 201, 200, 422, 400


MESSAGES: dict[str, str] = yaml.safe_load(
    (Path(__file__).parent / "messages.yaml").read_text(encoding="utf-8")
)


@dataclass(frozen=True)
class Case:
    """One object sent to the API server (``obj``; over ``old`` for an update), its answer's
    HTTP status and the ``(path, text)`` of the errors :func:`check_object` reports (``only``:
    and no others)."""

    id: str
    obj: dict[str, Any]
    code: int
    errors: tuple[tuple[str, str], ...] = ()
    only: bool = False
    old: dict[str, Any] | None = None
    status: bool = False  # an update of the status subresource
    field_validation: str = "Strict"

    @property
    def ok(self) -> bool:
        return self.code < 300

    @property
    def message(self) -> str:
        """The API server's message for a refusal (tests/crd_messages.yaml)."""
        return MESSAGES.get(self.id, "")


JOB: dict[str, Any] = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: demo, namespace: default}
spec:
  runtimeRef: {name: torch-distributed}
  trainer: {numNodes: 2, command: [torchrun, train.py]}
"""
)

RUNTIME: dict[str, Any] = yaml.safe_load(
    """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: rt}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
      - name: node
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec:
            template:
              spec:
                containers: [{name: node, image: busybox}]
"""
)

POD_SPEC = "spec.template.spec.replicatedJobs[0].template.spec.template.spec"


def with_(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of ``base`` with the dotted ``path`` set to ``value`` (creating maps)."""
    out = copy.deepcopy(base)
    node = out
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return out


def named(base: dict[str, Any], name: str, kind: str = "") -> dict[str, Any]:
    """``base`` under another name (and kind: a TrainingRuntime lives in ``default``)."""
    out = with_(base, "metadata.name", name)
    if kind:
        out["kind"] = kind
        if kind == "TrainingRuntime":
            out["metadata"]["namespace"] = "default"
    return out


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod spec of a runtime's first replicated job."""
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]
    return spec


def invalid(
    case_id: str, obj: dict[str, Any], *errors: tuple[str, str], only: bool = False
) -> Case:
    return Case(case_id, obj, INVALID, errors, only)


def changed(
    case_id: str,
    old: dict[str, Any],
    new: dict[str, Any],
    *errors: tuple[str, str],
    only: bool = False,
    status: bool = False,
) -> Case:
    """An update of ``old`` to ``new`` (both named ``case_id``: the old one is stored)."""
    old, new = named(old, case_id), named(new, case_id)
    code = INVALID if errors else UPDATED
    return Case(case_id, new, code, errors, only, old, status)
