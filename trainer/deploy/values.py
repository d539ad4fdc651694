"""The parameters of the install (``trainer manifests -f values.yaml`` and its flags).

A values file is a YAML map of the keys below; unknown keys and wrong types are errors that
name the key and list what is accepted (:class:`ValuesError`). Defaults give exactly the
kustomize tree committed under ``manifests/``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainer import __version__
from trainer.controller.config import FEATURE_GATES
from trainer.machinery.safeload import CONFIG_LIMITS, InputError, load_yaml

DEFAULT_NAMESPACE = "kubeflow-system"
DEFAULT_IMAGE = f"trainer-py:{__version__}"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|P|Pi|E|Ei)?$")


class ValuesError(ValueError):
    """A values file or flag that cannot be used; the message is one line per problem, each
    naming the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


def _quantities(value: dict[str, str]) -> dict[str, str]:
    for resource, quantity in value.items():
        if resource not in ("cpu", "memory", "ephemeral-storage"):
            raise ValueError(
                f"unknown resource {resource!r}; accepted: cpu, memory, ephemeral-storage"
            )
        if not _QUANTITY.match(quantity):
            raise ValueError(f"{resource}: {quantity!r} is not a quantity (e.g. 100m, 256Mi)")
    return value


class Resources(_Strict):
    requests: dict[str, str] = Field(default_factory=lambda: {"cpu": "100m", "memory": "256Mi"})
    limits: dict[str, str] = Field(default_factory=lambda: {"cpu": "1", "memory": "1Gi"})

    _check_requests = field_validator("requests", "limits")(_quantities)


class Webhook(_Strict):
    failure_policy: Literal["Fail", "Ignore"] = Field("Fail", alias="failurePolicy")
    """Fail (the default) refuses TrainJobs and runtimes while no webhook replica answers."""
    timeout_seconds: int = Field(10, alias="timeoutSeconds", ge=1, le=30)


class Values(_Strict):
    namespace: str = DEFAULT_NAMESPACE
    image: str = DEFAULT_IMAGE
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", alias="imagePullPolicy"
    )
    replicas: int = Field(2, ge=1)
    """Two replicas (the default) keep the webhook answering while one restarts; a
    PodDisruptionBudget is added from two replicas up."""
    log_level: str = Field("info", alias="logLevel")
    resources: Resources = Field(default_factory=Resources)
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    priority_class_name: str = Field("", alias="priorityClassName")
    trainjob_concurrency: int = Field(5, alias="trainJobConcurrency", ge=1)
    feature_gates: dict[str, bool] = Field(default_factory=dict, alias="featureGates")
    webhook: Webhook = Field(default_factory=Webhook)

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if len(value) > 63 or not _DNS_LABEL.match(value):
            raise ValueError(
                f"{value!r} is not a namespace name (lowercase letters, digits and '-', "
                "at most 63 characters)"
            )
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not value or any(ch.isspace() for ch in value):
            raise ValueError(f"{value!r} is not an image reference (e.g. registry/trainer:v1)")
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        if value not in ("debug", "info", "warning", "error") and not value.isdigit():
            raise ValueError(f"{value!r}: use debug, info, warning, error or a zap level number")
        return value

    @field_validator("feature_gates")
    @classmethod
    def _gates(cls, value: dict[str, bool]) -> dict[str, bool]:
        for name in value:
            if name not in FEATURE_GATES:
                raise ValueError(
                    f"unknown feature gate {name!r}; known: {', '.join(sorted(FEATURE_GATES))}"
                )
        return value


def _accepted(loc: tuple[int | str, ...]) -> list[str]:
    model: type[BaseModel] = Values
    for part in loc:
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return sorted(f.alias or n for n, f in model.model_fields.items())


def _key(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else ("." if out else "") + str(part)
    return out


def _problems(exc: ValidationError, source: str, flags: frozenset[str]) -> list[str]:
    lines = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        if len(loc) == 1 and loc[0] in flags:  # a command-line flag: name the flag
            message = str((error.get("ctx") or {}).get("error") or error["msg"])
            lines.append(f"--{loc[0]}: {message} (got {error.get('input')!r})")
            continue
        if error["type"] == "extra_forbidden":
            accepted = _accepted(loc[:-1])
            lines.append(
                f"{source}: unknown key {_key(loc)!r}; accepted keys"
                f"{' under ' + _key(loc[:-1]) if loc[:-1] else ''}: {', '.join(accepted)}"
            )
            continue
        message = str((error.get("ctx") or {}).get("error") or error["msg"])
        if error["type"] != "value_error":
            message = f"{message} (got {error.get('input')!r})"
        lines.append(f"{source}: {_key(loc)}: {message}")
    return lines


def load_values(
    text: str | bytes | None = None,
    source: str = "values",
    overrides: Mapping[str, Any] | None = None,
) -> Values:
    """Values from YAML ``text`` (None: the defaults), with ``overrides`` (the command-line
    flags, keyed by their values-file name; None values are unset flags) applied on top.
    Errors name the key of the file (prefixed by ``source``) or the flag."""
    data: Any = {}
    if text is not None:
        try:
            data = load_yaml(text, source, CONFIG_LIMITS)
        except InputError as exc:
            raise ValuesError(str(exc)) from None
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ValuesError(f"{source}: must be a YAML map, got {type(data).__name__}")
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    try:
        return Values.model_validate({**data, **flags})
    except ValidationError as exc:
        raise ValuesError("\n".join(_problems(exc, source, frozenset(flags)))) from None
