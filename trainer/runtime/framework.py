"""The plugin framework: plugins run in a fixed, declared order within each phase.

Build phases, in order: EnforceMLPolicy -> EnforcePodGroupPolicy -> EnforcePodSpec ->
PreBuild -> Build. Beside the build (upstream's ``pkg/runtime/framework/interface.go`` has the
same split, one narrow interface per phase):

* Validate (admission): :class:`ReservedEnvs` (env names a plugin injects, so the TrainJob may
  not set them; reported together as one error) and :class:`Validator` (any other rule);
  :class:`RuntimeValidator` for the runtimes themselves;
* Status (controller): :class:`StatusPlugin`, the TrainJob's status from its JobSet;
* Watch (controller): :class:`WatchExtension`, the objects a plugin reads during its build
  and how their events map back to TrainJobs (:mod:`trainer.runtime.watch`).

A plugin implements only the phases it needs, each a small Protocol; the framework sorts
plugins into phases once, keeping the order they were declared in (upstream iterates a Go map,
so its order is unspecified; ours is not). Admission and the controller call the framework,
never a plugin by name: adding a plugin is its module plus one line in the registry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from trainer.api.v1alpha1 import TrainJob, TrainJobStatus
from trainer.jobset.types import JobSet
from trainer.machinery.errors import FieldError
from trainer.runtime.assemble import apply_trainer_env
from trainer.runtime.info import BuildContext, Info, Runtime
from trainer.runtime.validation import ClusterView, Verdict, reserved_envs_error
from trainer.runtime.watch import Watch, check_watches


@runtime_checkable
class Plugin(Protocol):
    name: str


@runtime_checkable
class EnforceMLPolicy(Plugin, Protocol):
    def enforce_ml_policy(self, info: Info) -> None: ...


@runtime_checkable
class EnforcePodGroupPolicy(Plugin, Protocol):
    def enforce_pod_group_policy(self, info: Info) -> None: ...


@runtime_checkable
class EnforcePodSpec(Plugin, Protocol):
    def enforce_pod_spec(self, info: Info, ctx: BuildContext) -> None: ...


@runtime_checkable
class PreBuild(Plugin, Protocol):
    def pre_build(self, info: Info) -> None: ...


@runtime_checkable
class Builder(Plugin, Protocol):
    def build(self, info: Info, ctx: BuildContext) -> list[dict[str, Any]]:
        """Objects to apply (wire dicts), in apply order."""
        ...


@runtime_checkable
class ReservedEnvs(Plugin, Protocol):
    def reserved_envs(self, info: Info) -> Sequence[str]:
        """Env names ``spec.trainer.env`` may not set on this TrainJob (the ones the plugin
        injects; none when its policy is not active)."""
        ...


@runtime_checkable
class Validator(Plugin, Protocol):
    def validate(self, info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
        """Admission checks of the TrainJob in ``info`` (``old`` on update; ``view``: what the
        caller read of the cluster). Runs on the Info before any other phase and must not
        change it."""
        ...


@runtime_checkable
class RuntimeValidator(Plugin, Protocol):
    def validate_runtime(self, runtime: Runtime, old: Runtime | None) -> Verdict:
        """Admission checks of a (Cluster)TrainingRuntime (``old`` on update)."""
        ...


@runtime_checkable
class StatusPlugin(Plugin, Protocol):
    def status(self, trainjob: TrainJob, jobset: JobSet) -> TrainJobStatus | None:
        """The TrainJob's status derived from its JobSet, or None to leave it."""
        ...


@runtime_checkable
class WatchExtension(Plugin, Protocol):
    def watches(self, ctx: BuildContext) -> Sequence[Watch]:
        """The objects the plugin's build reads (:mod:`trainer.runtime.watch`)."""
        ...


PHASES: dict[str, type] = {
    "EnforceMLPolicy": EnforceMLPolicy,
    "EnforcePodGroupPolicy": EnforcePodGroupPolicy,
    "EnforcePodSpec": EnforcePodSpec,
    "PreBuild": PreBuild,
    "Build": Builder,
    "ReservedEnvs": ReservedEnvs,
    "Validate": Validator,
    "ValidateRuntime": RuntimeValidator,
    "Status": StatusPlugin,
    "Watch": WatchExtension,
}
"""Each phase's name and the Protocol a plugin implements to take part in it."""


@dataclass
class Framework:
    """Runs plugins phase by phase in their declared order."""

    plugins: Sequence[Plugin]
    _ml: list[EnforceMLPolicy] = field(init=False)
    _pod_group: list[EnforcePodGroupPolicy] = field(init=False)
    _pod_spec: list[EnforcePodSpec] = field(init=False)
    _pre_build: list[PreBuild] = field(init=False)
    _builders: list[Builder] = field(init=False)
    _reserved: list[ReservedEnvs] = field(init=False)
    _validators: list[Validator] = field(init=False)
    _runtime_validators: list[RuntimeValidator] = field(init=False)
    _status: list[StatusPlugin] = field(init=False)
    _watchers: list[WatchExtension] = field(init=False)

    def __post_init__(self) -> None:
        names = [p.name for p in self.plugins]
        if len(set(names)) != len(names):
            raise ValueError(f"plugin names must be unique: {names}")
        self._ml = [p for p in self.plugins if isinstance(p, EnforceMLPolicy)]
        self._pod_group = [p for p in self.plugins if isinstance(p, EnforcePodGroupPolicy)]
        self._pod_spec = [p for p in self.plugins if isinstance(p, EnforcePodSpec)]
        self._pre_build = [p for p in self.plugins if isinstance(p, PreBuild)]
        self._builders = [p for p in self.plugins if isinstance(p, Builder)]
        self._reserved = [p for p in self.plugins if isinstance(p, ReservedEnvs)]
        self._validators = [p for p in self.plugins if isinstance(p, Validator)]
        self._runtime_validators = [p for p in self.plugins if isinstance(p, RuntimeValidator)]
        self._status = [p for p in self.plugins if isinstance(p, StatusPlugin)]
        self._watchers = [p for p in self.plugins if isinstance(p, WatchExtension)]

    def phases(self) -> dict[str, list[str]]:
        """Plugin names per phase, in run order (for docs and tests)."""
        return {
            "EnforceMLPolicy": [p.name for p in self._ml],
            "EnforcePodGroupPolicy": [p.name for p in self._pod_group],
            "EnforcePodSpec": [p.name for p in self._pod_spec],
            "PreBuild": [p.name for p in self._pre_build],
            "Build": [p.name for p in self._builders],
            "ReservedEnvs": [p.name for p in self._reserved],
            "Validate": [p.name for p in self._validators],
            "ValidateRuntime": [p.name for p in self._runtime_validators],
            "Status": [p.name for p in self._status],
            "Watch": [p.name for p in self._watchers],
        }

    def run(self, info: Info, ctx: BuildContext) -> list[dict[str, Any]]:
        for ml in self._ml:
            ml.enforce_ml_policy(info)
        for pg in self._pod_group:
            pg.enforce_pod_group_policy(info)
        for ps in self._pod_spec:
            ps.enforce_pod_spec(info, ctx)
        for pb in self._pre_build:
            pb.pre_build(info)
        apply_trainer_env(info)
        objects: list[dict[str, Any]] = []
        for builder in self._builders:
            objects.extend(builder.build(info, ctx))
        return objects

    def validate(self, info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
        """The Validate phase: one error for every reserved env name the TrainJob sets, then
        every validator's warnings and errors, all collected (not just the first)."""
        reserved = [name for p in self._reserved for name in p.reserved_envs(info)]
        warnings: list[str] = []
        errors = reserved_envs_error(info, reserved)
        for v in self._validators:
            verdict = v.validate(info, old, view)
            warnings += verdict.warnings
            errors += verdict.errors
        return Verdict(warnings, errors)

    def validate_runtime(self, runtime: Runtime, old: Runtime | None) -> Verdict:
        """The runtime validators' warnings and errors, all collected."""
        warnings: list[str] = []
        errors: list[FieldError] = []
        for v in self._runtime_validators:
            verdict = v.validate_runtime(runtime, old)
            warnings += verdict.warnings
            errors += verdict.errors
        return Verdict(warnings, errors)

    def status(self, trainjob: TrainJob, jobset: JobSet) -> TrainJobStatus | None:
        """The Status phase: each status plugin sees the TrainJob with the status the ones
        before it made; None when no plugin had one."""
        result: TrainJobStatus | None = None
        for plugin in self._status:
            current = trainjob if result is None else trainjob.model_copy(update={"status": result})
            result = plugin.status(current, jobset) or result
        return result

    def watches(self, ctx: BuildContext) -> list[Watch]:
        """The Watch phase: every plugin's declarations, duplicates removed."""
        return check_watches([w for p in self._watchers for w in p.watches(ctx)])
