"""A Training Operator v1 job as the converter reads it, and what its framework builders return.

:class:`V1Job` checks the kind, apiVersion, metadata and replica specs of one v1 document (every
error a :class:`ConvertError` naming the document and field) and answers what the framework
builders (:mod:`trainer.convert.frameworks`) ask of it: a role's pod template with the main
container renamed ``node`` and v1's restartPolicy, the framework's port, the DNS name of a pod.
Warnings about fields without an exact v2 equivalent are collected on the job. A builder
returns a :class:`Plan`: the JobSet's replicated jobs, the ML policy and the TrainJob trainer.

Kept apart from the builders so that each framework's module reads as its own mapping, and
apart from :mod:`trainer.convert.v1` (the entry point) so that they can import it without a
cycle.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from trainer.api import constants as c
from trainer.api.load import pydantic_errors
from trainer.jobset import contract as jsc
from trainer.machinery.errors import format_errors
from trainer.machinery.models.core import PodTemplateSpec

V1 = "kubeflow.org/v1"
V2BETA1 = "kubeflow.org/v2beta1"

Obj = dict[str, Any]


class ConvertError(ValueError):
    """The input is not a v1 job this tool can convert; the message names the field."""


@dataclass(frozen=True)
class ConvertWarning:
    """A v1 field without an exact v2 equivalent, and what the converted job does instead."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass
class Converted:
    """The converted objects of one v1 job (runtime first, then the TrainJob)."""

    kind: str
    name: str
    namespace: str | None
    objects: list[Obj]
    warnings: list[ConvertWarning] = field(default_factory=list)
    runtime: str = ""
    """``TrainingRuntime/<name>`` (its own) or ``ClusterTrainingRuntime/<name>`` (a built-in)."""
    info: list[str] = field(default_factory=list)
    """Why the job uses the runtime it does (one line each)."""


@dataclass(frozen=True)
class KindInfo:
    """What differs between the v1 kinds: where the replica specs are, the main container,
    the roles, the framework, its port and the default restartPolicy."""

    specs_field: str
    container: str
    roles: tuple[str, ...]
    framework: str
    port_name: str = ""
    default_port: int = 0
    restart_policy: str = "OnFailure"


KINDS: dict[str, KindInfo] = {
    "PyTorchJob": KindInfo(
        "pytorchReplicaSpecs", "pytorch", ("Master", "Worker"), "torch", "pytorchjob-port", 23456
    ),
    "XGBoostJob": KindInfo(
        "xgbReplicaSpecs",
        "xgboost",
        ("Master", "Worker"),
        "xgboost",
        "xgboostjob-port",
        9999,
        "Never",
    ),
    "TFJob": KindInfo(
        "tfReplicaSpecs",
        "tensorflow",
        ("Chief", "Master", "Worker", "PS", "Evaluator"),
        "tensorflow",
        "tfjob-port",
        2222,
        "Never",
    ),
    "PaddleJob": KindInfo(
        "paddleReplicaSpecs", "paddle", ("Master", "Worker"), "paddle", "master", 36543
    ),
    "JAXJob": KindInfo("jaxReplicaSpecs", "jax", ("Worker",), "jax", "jaxjob-port", 6666, "Never"),
    "MPIJob": KindInfo("mpiReplicaSpecs", "mpi", ("Launcher", "Worker"), "mpi", "", 0, "Never"),
}


# --- small helpers -------------------------------------------------------------------------------
def env_var(name: str, value: str) -> Obj:
    return {"name": name, "value": value}


def env_from_field(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def upsert_env(container: Obj, envs: list[Obj]) -> None:
    names = {e["name"] for e in envs}
    kept = [e for e in container.get("env") or [] if e.get("name") not in names]
    container["env"] = kept + envs


def require_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConvertError(f"{where}: must be an integer, got {value!r}")
    return value


@dataclass
class Role:
    """One v1 replica spec."""

    name: str  # canonical v1 role name (Master, Worker, ...)
    path: str  # spec.<field>.<Role>
    replicas: int
    template: Obj
    restart_policy: str | None


class V1Job:
    """The state of one conversion."""

    def __init__(self, data: Mapping[str, Any], label: str) -> None:
        self.label = label
        kind = data.get("kind")
        api_version = data.get("apiVersion")
        if not isinstance(kind, str) or kind not in KINDS:
            raise ConvertError(
                f"{label}: kind {kind!r} is not a Training Operator v1 job (expected one of "
                f"{', '.join(KINDS)})"
            )
        allowed = (V1, V2BETA1) if kind == "MPIJob" else (V1,)
        if api_version not in allowed:
            raise ConvertError(
                f"{label}: apiVersion {api_version!r} of {kind} is not supported "
                f"(expected {' or '.join(allowed)})"
            )
        self.kind = kind
        self.info = KINDS[kind]
        self.api_version = api_version
        meta = data.get("metadata")
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
            raise ConvertError(f"{label}: {kind} has no metadata.name")
        self.meta = dict(meta)
        self.name: str = meta["name"]
        namespace = meta.get("namespace")
        self.namespace: str | None = namespace if isinstance(namespace, str) else None
        spec = data.get("spec")
        if not isinstance(spec, Mapping):
            raise ConvertError(f"{label}: {kind}/{self.name} has no spec")
        self.spec: Mapping[str, Any] = spec
        self.warnings: list[ConvertWarning] = []
        self.roles = self._roles()

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(ConvertWarning(path, message))

    def error(self, path: str, message: str) -> ConvertError:
        return ConvertError(f"{self.label}: {self.kind}/{self.name}: {path}: {message}")

    # --- replica specs ---------------------------------------------------------------------------
    def _roles(self) -> dict[str, Role]:
        key = self.info.specs_field
        specs = self.spec.get(key)
        path = f"spec.{key}"
        if not isinstance(specs, Mapping) or not specs:
            raise self.error(path, "missing or empty: a v1 job needs at least one replica spec")
        canon = {r.lower(): r for r in self.info.roles}
        roles: dict[str, Role] = {}
        for raw, rspec in specs.items():
            role = canon.get(str(raw).lower())
            rpath = f"{path}.{raw}"
            if role is None:
                raise self.error(
                    rpath, f"unknown replica type (expected one of {', '.join(self.info.roles)})"
                )
            if not isinstance(rspec, Mapping):
                raise self.error(rpath, "must be an object")
            replicas = require_int(rspec.get("replicas", 1), f"{rpath}.replicas")
            template = rspec.get("template")
            pod = template.get("spec") if isinstance(template, Mapping) else None
            containers = pod.get("containers") if isinstance(pod, Mapping) else None
            if not isinstance(containers, list) or not containers:
                raise self.error(f"{rpath}.template.spec.containers", "must list a container")
            if replicas < 0:
                raise self.error(f"{rpath}.replicas", f"must be 0 or more, got {replicas}")
            try:  # the types of every modelled pod field, before anything reads them
                PodTemplateSpec.from_wire(template or {})
            except ValidationError as exc:
                raise self.error(f"{rpath}.template", format_errors(pydantic_errors(exc))) from None
            restart = rspec.get("restartPolicy")
            roles[role] = Role(
                role,
                rpath,
                replicas,
                copy.deepcopy(dict(template)),  # type: ignore[arg-type]
                restart if isinstance(restart, str) else None,
            )
        return roles

    def pod_template(self, role: Role, container: str | None = None) -> Obj:
        """The role's pod template with the main container renamed ``node`` and a Job-valid
        restartPolicy."""
        tmpl = copy.deepcopy(role.template)
        pod: Obj = tmpl.setdefault("spec", {})
        containers: list[Obj] = pod["containers"]
        names = [ctr.get("name") for ctr in containers]
        main = container or self.info.container
        if c.CONTAINER_NODE not in names:
            index = names.index(main) if main in names else 0
            if main not in names and len(containers) > 1:
                self.warn(
                    f"{role.path}.template.spec.containers",
                    f"no container named {main!r}; container {names[0]!r} is taken as the "
                    "main container and renamed 'node'",
                )
            containers[index]["name"] = c.CONTAINER_NODE
        # v1 defaults the replica's restartPolicy and always writes it over the template's.
        policy = role.restart_policy or self.default_restart_policy(role)
        if policy == "ExitCode":
            self.warn(
                f"{role.path}.restartPolicy",
                "ExitCode has no Job equivalent; pods use restartPolicy Never and a failed pod "
                "fails its Job (the JobSet failurePolicy decides about restarts)",
            )
            policy = "Never"
        elif policy == "Always":
            self.warn(
                f"{role.path}.restartPolicy",
                "Always is not allowed for Job pods; pods use restartPolicy OnFailure",
            )
            policy = "OnFailure"
        pod["restartPolicy"] = policy
        # As the built-in runtimes: a failed container's last output becomes its termination
        # message, which the TrainJob's Failed condition quotes (docs/troubleshooting.md).
        for ctr in [*containers, *pod.get("initContainers", [])]:
            ctr.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
        return tmpl

    def default_restart_policy(self, role: Role) -> str:
        """v1's default for an unset replica restartPolicy; the MPI operator's v2beta1 MPIJob
        defaults its Launcher to OnFailure and its Workers to Never."""
        if self.api_version == V2BETA1 and role.name == "Launcher":
            return "OnFailure"
        return self.info.restart_policy

    def node(self, template: Obj) -> Obj:
        return next(ctr for ctr in template["spec"]["containers"] if ctr["name"] == "node")

    def port(self, role: Role) -> int:
        """The v1 port of the framework (the main container's named port, else the default)."""
        for ctr in role.template.get("spec", {}).get("containers", []):
            for port in ctr.get("ports") or []:
                if port.get("name") == self.info.port_name and isinstance(
                    port.get("containerPort"), int
                ):
                    return int(port["containerPort"])
        return self.info.default_port

    def host(self, rjob: str, index: int) -> str:
        return jsc.pod_dns_name(self.name, rjob, 0, index, self.name)


def replicated_job(name: str, count: int, template: Obj, trainer: bool) -> Obj:
    job: Obj = {"name": name, "replicas": 1, "template": {}}
    if trainer:
        job["template"]["metadata"] = {"labels": {c.LABEL_ANCESTOR: c.ANCESTOR_TRAINER}}
    job["template"]["spec"] = {"parallelism": count, "completions": count, "template": template}
    return job


def ensure_port(container: Obj, port: int, name: str) -> None:
    ports = container.setdefault("ports", [])
    if not any(p.get("containerPort") == port for p in ports):
        ports.append({"name": name, "containerPort": port} if name else {"containerPort": port})


@dataclass
class Plan:
    """What a framework builder decides: the jobs, the ML policy and the TrainJob trainer."""

    jobs: list[Obj]
    ml_policy: Obj | None
    trainer: Obj | None = None
    success_policy: Obj | None = None
    depends_on: dict[str, list[Obj]] = field(default_factory=dict)
