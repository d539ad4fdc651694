"""Reuse a built-in ClusterTrainingRuntime for a converted job when one fits (pure).

A built-in *fits* when the TrainJob rewritten to reference it renders the same pods and side
objects as the TrainJob on its own converted TrainingRuntime
(:mod:`trainer.convert.equivalence`). The rewritten TrainJob may only use what the TrainJob
API lets a user set:

- ``spec.trainer``: ``image``, ``command``, ``args``, ``env`` and ``resourcesPerNode`` of the
  trainer step's ``node`` container (plus ``numNodes`` / ``numProcPerNode`` as converted);
- one ``spec.runtimePatches`` entry (manager :data:`PATCH_MANAGER`) per replicated job with
  the pod fields a patch may set (``PodSpecPatch``'s): ``nodeSelector``, ``affinity``,
  ``tolerations``, ``volumes``, ``serviceAccountName``, ``imagePullSecrets``, ``securityContext``,
  ``terminationGracePeriodSeconds``, ``schedulingGates``, pod template labels and
  annotations, and per container ``volumeMounts`` and ``securityContext`` (and ``env`` on
  containers other than ``node``, which admission reserves for ``spec.trainer.env``).

Anything else the converted runtime carries (another restartPolicy, extra containers, a
JobSet failure policy, a PodGroup policy, ...) makes the renderings differ, and the job keeps
its own runtime. The decision is only as good as the built-ins given: the ones shipped with
this version, which a cluster may have changed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer.api import constants as c
from trainer.api.load import ObjectError, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.convert.equivalence import first_difference, rendered_view, show
from trainer.plugins.registry import render
from trainer.runtime.info import BuildContext, BuildError, SSHKeyPair

Obj = dict[str, Any]

PATCH_MANAGER = "trainer.kubeflow.org/convert"
POD_PATCH_FIELDS = (
    "serviceAccountName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "volumes",
    "imagePullSecrets",
    "securityContext",
    "terminationGracePeriodSeconds",
    "schedulingGates",
)
CONTAINER_PATCH_FIELDS = ("volumeMounts", "securityContext")
TRAINER_FIELDS = ("image", "command", "args", "env")
# Both renderings use these keys; only MPI's Secret contains them, identically on both sides.
_KEYS = SSHKeyPair(b"convert-private-key", b"convert-public-key")


@dataclass(frozen=True)
class Fit:
    """The outcome of trying one built-in: the TrainJob referencing it, or why not."""

    runtime: str
    trainjob: Obj | None
    reason: str | None


def _jobs(runtime: Mapping[str, Any]) -> list[Obj]:
    jobs: list[Obj] = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return jobs


def _pod_template(rjob: Mapping[str, Any]) -> Obj:
    template: Obj = rjob.get("template", {}).get("spec", {}).get("template", {})
    return template


def _is_trainer(rjob: Mapping[str, Any]) -> bool:
    labels = rjob.get("template", {}).get("metadata", {}).get("labels") or {}
    return bool(labels.get(c.LABEL_ANCESTOR) == c.ANCESTOR_TRAINER)


def _job_patch(own: Mapping[str, Any], base: Mapping[str, Any]) -> Obj | None:
    """The runtime patch that brings ``base``'s pod template towards ``own``'s."""
    own_tmpl, base_tmpl = _pod_template(own), _pod_template(base)
    own_spec, base_spec = own_tmpl.get("spec", {}), base_tmpl.get("spec", {})
    spec: Obj = {}
    for key in POD_PATCH_FIELDS:
        if key in own_spec and own_spec[key] != base_spec.get(key):
            spec[key] = copy.deepcopy(own_spec[key])
    base_names = {ctr.get("name") for ctr in base_spec.get("containers") or []}
    containers: list[Obj] = []
    for ctr in own_spec.get("containers") or []:
        name = ctr.get("name")
        if name not in base_names:
            continue  # cannot be added by a patch; the renderings will differ
        patch: Obj = {"name": name}
        fields = (
            CONTAINER_PATCH_FIELDS
            if name == c.CONTAINER_NODE
            else (
                *CONTAINER_PATCH_FIELDS,
                "env",
            )
        )
        for key in fields:
            if ctr.get(key):
                patch[key] = copy.deepcopy(ctr[key])
        if len(patch) > 1:
            containers.append(patch)
    if containers:
        spec["containers"] = containers
    template: Obj = {}
    meta = {
        k: v
        for k, v in (own_tmpl.get("metadata") or {}).items()
        if k in ("labels", "annotations") and v
    }
    if meta:
        template["metadata"] = copy.deepcopy(meta)
    if spec:
        template["spec"] = spec
    if not template:
        return None
    return {"name": own["name"], "template": {"spec": {"template": template}}}


def candidate_trainjob(
    trainjob: Mapping[str, Any], runtime: Mapping[str, Any], builtin: Mapping[str, Any]
) -> Obj | str:
    """``trainjob`` rewritten onto ``builtin`` (wire form), or why it cannot be written."""
    name = builtin["metadata"]["name"]
    own_jobs = {j["name"]: j for j in _jobs(runtime)}
    base_jobs = {j["name"]: j for j in _jobs(builtin)}
    if sorted(own_jobs) != sorted(base_jobs):
        return f"its replicated jobs {sorted(own_jobs)} differ from {name}'s {sorted(base_jobs)}"
    out = copy.deepcopy(dict(trainjob))
    spec: Obj = out["spec"]
    spec["runtimeRef"] = {
        "apiGroup": c.GROUP,
        "kind": c.KIND_CLUSTER_TRAINING_RUNTIME,
        "name": name,
    }
    trainer: Obj = dict(spec.get("trainer") or {})
    step = next((j for j in own_jobs.values() if _is_trainer(j)), None)
    node = None
    if step is not None:
        node = next(
            (
                ctr
                for ctr in _pod_template(step).get("spec", {}).get("containers") or []
                if ctr.get("name") == c.CONTAINER_NODE
            ),
            None,
        )
    if node is not None:
        for key in TRAINER_FIELDS:
            if node.get(key):
                trainer[key] = copy.deepcopy(node[key])
        if node.get("resources"):
            trainer["resourcesPerNode"] = copy.deepcopy(node["resources"])
    if trainer:
        spec["trainer"] = trainer
    patches = [p for n, j in own_jobs.items() if (p := _job_patch(j, base_jobs[n])) is not None]
    if patches:
        spec["runtimePatches"] = [
            {
                "manager": PATCH_MANAGER,
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": patches}}},
            }
        ]
    return out


def _render(trainjob: Mapping[str, Any], runtime: Mapping[str, Any]) -> Obj:
    job = parse_object(dict(trainjob))
    rt = parse_object(dict(runtime))
    assert isinstance(job, TrainJob)
    assert isinstance(rt, TrainingRuntime | ClusterTrainingRuntime)
    if job.metadata is not None and job.metadata.namespace is None:
        job.metadata.namespace = "default"
    name = job.metadata.name if job.metadata is not None else ""
    return rendered_view(render(job, rt, ctx=BuildContext(lambda: _KEYS)), name or "")


def try_builtin(
    trainjob: Mapping[str, Any], runtime: Mapping[str, Any], builtin: Mapping[str, Any]
) -> Fit:
    """Whether ``builtin`` fits the converted ``trainjob`` + ``runtime`` (module docstring)."""
    name = str(builtin["metadata"]["name"])
    candidate = candidate_trainjob(trainjob, runtime, builtin)
    if isinstance(candidate, str):
        return Fit(name, None, candidate)
    try:
        own = _render(trainjob, runtime)
        reused = _render(candidate, builtin)
    except (BuildError, ObjectError, ValueError) as exc:
        return Fit(name, None, f"{name} does not render for it: {exc}")
    diff = first_difference(own, reused)
    if diff is not None:
        return Fit(
            name,
            None,
            f"{name} would render {diff.path} as {show(diff.right)} instead of {show(diff.left)}",
        )
    return Fit(name, candidate, None)
