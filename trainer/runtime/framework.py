"""The plugin framework: plugins run in a fixed, declared order within each phase.

Phases, in order: EnforceMLPolicy -> EnforcePodGroupPolicy -> EnforcePodSpec -> PreBuild ->
Build; plus Validate (admission) and Status hooks. A plugin implements only the phases it
needs, each a small Protocol; the framework sorts plugins into phases once, keeping the order
they were declared in (upstream iterates a Go map, so its order is unspecified; ours is not).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from trainer.api.errors import FieldError
from trainer.api.jobset import JobSet
from trainer.api.v1alpha1 import TrainJob, TrainJobStatus
from trainer.runtime.info import BuildContext, Info


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
class Validator(Plugin, Protocol):
    def validate(self, info: Info, old: TrainJob | None) -> tuple[list[str], list[FieldError]]:
        """Admission checks of the TrainJob in ``info`` (``old`` on update): warnings and
        field errors. Runs on the Info before any other phase."""
        ...


@runtime_checkable
class StatusPlugin(Plugin, Protocol):
    def status(self, trainjob: TrainJob, jobset: JobSet) -> TrainJobStatus | None:
        """The TrainJob's status derived from its JobSet, or None to leave it."""
        ...


@dataclass
class Framework:
    """Runs plugins phase by phase in their declared order."""

    plugins: Sequence[Plugin]
    _ml: list[EnforceMLPolicy] = field(init=False)
    _pod_group: list[EnforcePodGroupPolicy] = field(init=False)
    _pod_spec: list[EnforcePodSpec] = field(init=False)
    _pre_build: list[PreBuild] = field(init=False)
    _builders: list[Builder] = field(init=False)
    _validators: list[Validator] = field(init=False)
    _status: list[StatusPlugin] = field(init=False)

    def __post_init__(self) -> None:
        names = [p.name for p in self.plugins]
        if len(set(names)) != len(names):
            raise ValueError(f"plugin names must be unique: {names}")
        self._ml = [p for p in self.plugins if isinstance(p, EnforceMLPolicy)]
        self._pod_group = [p for p in self.plugins if isinstance(p, EnforcePodGroupPolicy)]
        self._pod_spec = [p for p in self.plugins if isinstance(p, EnforcePodSpec)]
        self._pre_build = [p for p in self.plugins if isinstance(p, PreBuild)]
        self._builders = [p for p in self.plugins if isinstance(p, Builder)]
        self._validators = [p for p in self.plugins if isinstance(p, Validator)]
        self._status = [p for p in self.plugins if isinstance(p, StatusPlugin)]

    def phases(self) -> dict[str, list[str]]:
        """Plugin names per phase, in run order (for docs and tests)."""
        return {
            "EnforceMLPolicy": [p.name for p in self._ml],
            "EnforcePodGroupPolicy": [p.name for p in self._pod_group],
            "EnforcePodSpec": [p.name for p in self._pod_spec],
            "PreBuild": [p.name for p in self._pre_build],
            "Build": [p.name for p in self._builders],
            "Validate": [p.name for p in self._validators],
            "Status": [p.name for p in self._status],
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
        objects: list[dict[str, Any]] = []
        for builder in self._builders:
            objects.extend(builder.build(info, ctx))
        return objects

    def validate(self, info: Info, old: TrainJob | None) -> tuple[list[str], list[FieldError]]:
        """Every validator's warnings and errors, all collected (not just the first)."""
        warnings: list[str] = []
        errors: list[FieldError] = []
        for v in self._validators:
            w, e = v.validate(info, old)
            warnings.extend(w)
            errors.extend(e)
        return warnings, errors

    def status(self, trainjob: TrainJob, jobset: JobSet) -> TrainJobStatus | None:
        """The status from the last status plugin that has one."""
        result: TrainJobStatus | None = None
        for plugin in self._status:
            result = plugin.status(trainjob, jobset) or result
        return result
