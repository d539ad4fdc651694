"""Pod equivalence of two renderings of one TrainJob (pure).

:func:`rendered_view` turns what :func:`trainer.plugins.registry.render` returns into a value
that is equal for two renderings exactly when they would make the same pods and side objects:

- The JobSet's replicated jobs are expanded into their pods, keyed
  ``<replicatedJob>/<pod index>`` (index = job index x pods per job + completion index, as
  the Job controller numbers them).
- Every container's env becomes ``name -> value`` as the kubelet resolves it: the
  completion-index and job-index fieldRefs become the pod's numbers, other ``valueFrom``
  sources stay as they are (the same source gives the same value), and ``$(VAR)`` references
  to earlier variables are expanded (``$$`` is a literal ``$``).
- A pod template without ``restartPolicy`` gets ``OnFailure``, as the JobSet webhook defaults it.
- Container ``ports`` without a ``hostPort`` are dropped: Kubernetes documents them as
  informational (declaring one neither opens nor closes anything). Ports with a ``hostPort``
  are kept, since they change scheduling.
- The runtime snapshot ConfigMap (a copy of the runtime, which necessarily differs) is left
  out. Everything else (JobSet metadata and spec, PodGroups, Secrets, ConfigMaps) is compared
  as rendered.

:func:`first_difference` names the first path where two views differ.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainer.api import constants as c
from trainer.jobset import contract as jsc

Obj = dict[str, Any]

_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_MISSING = object()


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion of ``value`` against the variables defined before it."""

    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REF.sub(sub, value)


def resolved_env(container: Mapping[str, Any], fields: Mapping[str, str]) -> dict[str, str]:
    """The container's env as the kubelet would set it, ``fields`` giving fieldRef values."""
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        name = var.get("name", "")
        source = var.get("valueFrom")
        if source is None:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        path = (source.get("fieldRef") or {}).get("fieldPath")
        if isinstance(path, str) and path in fields:
            env[name] = fields[path]
        else:
            env[name] = "valueFrom:" + json.dumps(source, sort_keys=True)
    return env


def _container(ctr: Mapping[str, Any], fields: Mapping[str, str]) -> Obj:
    out = {k: copy.deepcopy(v) for k, v in ctr.items() if k not in ("env", "ports")}
    env = resolved_env(ctr, fields)
    if env:
        out["env"] = env
    ports = [p for p in ctr.get("ports") or [] if p.get("hostPort")]
    if ports:
        out["ports"] = ports
    return out


def _pod(template: Mapping[str, Any], fields: Mapping[str, str]) -> Obj:
    pod = copy.deepcopy(dict(template))
    spec: Obj = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "OnFailure")
    for key in ("containers", "initContainers"):
        if key in spec:
            spec[key] = {ctr.get("name", ""): _container(ctr, fields) for ctr in spec[key]}
    return pod


def jobset_view(jobset: Mapping[str, Any]) -> Obj:
    """The JobSet with each replicated job's pod template replaced by its resolved pods."""
    out = copy.deepcopy(dict(jobset))
    spec: Obj = out.get("spec") or {}
    jobs: Obj = {}
    for rjob in spec.get("replicatedJobs") or []:
        job = copy.deepcopy(rjob)
        job_spec: Obj = job.get("template", {}).get("spec", {})
        template = job_spec.pop("template", {})
        count = int(job_spec.get("parallelism", 1))
        pods: Obj = {}
        for job_index in range(int(rjob.get("replicas", 1))):
            for index in range(count):
                fields = {
                    c.FIELD_PATH_COMPLETION_INDEX: str(index),
                    c.FIELD_PATH_JOB_INDEX: str(job_index),
                }
                pods[str(job_index * count + index)] = _pod(template, fields)
        job["pods"] = pods
        jobs[str(rjob.get("name"))] = job
    if "replicatedJobs" in spec:
        spec["replicatedJobs"] = jobs
    return out


def rendered_view(objects: list[Obj], trainjob_name: str) -> Obj:
    """``<Kind>/<name> -> object`` of a rendering, JobSets as :func:`jobset_view`, without
    the runtime snapshot."""
    snapshot = f"{trainjob_name}{c.RUNTIME_SNAPSHOT_SUFFIX}"
    out: Obj = {}
    for obj in objects:
        kind = obj.get("kind", "")
        name = (obj.get("metadata") or {}).get("name", "")
        if kind == "ConfigMap" and name == snapshot:
            continue
        out[f"{kind}/{name}"] = jobset_view(obj) if kind == jsc.KIND else obj
    return out


def show(value: Any) -> str:
    if value is _MISSING:
        return "unset"
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Difference:
    """Where two views first differ and the two values there."""

    path: str
    left: Any
    right: Any

    def __str__(self) -> str:
        return f"{self.path}: {show(self.left)} vs {show(self.right)}"


def first_difference(a: Any, b: Any, path: str = "") -> Difference | None:
    """The first path where ``a`` and ``b`` differ; None if they are equal."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            diff = first_difference(a.get(key, _MISSING), b.get(key, _MISSING), sub)
            if diff is not None:
                return diff
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff = first_difference(x, y, f"{path}[{i}]")
            if diff is not None:
                return diff
        return None
    if a == b:
        return None
    return Difference(path, a, b)
