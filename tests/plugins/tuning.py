"""A plugin that lives only in the test suite, to prove the framework needs nothing else.

It is built the way docs/extending.md describes a new ML policy, with one difference: a test
cannot add a field to the API model, so the policy is switched on by a TrainJob annotation
(``example.org/tuning-level``) instead of an ``mlPolicy`` field. Everything else is what a real
policy does, each through one framework phase:

EnforceMLPolicy
    container ``node`` of the trainer step gets ``TUNING_LEVEL`` (the annotation's value) and,
    when the TrainJob's tuning profile exists, ``TUNING_PROFILE`` (its ``profile`` key).
ReservedEnvs / Validate
    ``spec.trainer.env`` may not set either name; the level must be 1, 2 or 3 (Invalid at
    ``metadata.annotations[example.org/tuning-level]`` otherwise).
Watch
    the tuning profile is a ConfigMap labelled ``example.org/tuning-for: <trainjob>`` that the
    user writes; its events re-queue that TrainJob (``ByLabel``).

Registered only where a test passes it to ``Framework`` / ``Controller(framework=...)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainer.api import constants as c
from trainer.api.v1alpha1 import TrainJob
from trainer.machinery.errors import INVALID, FieldError
from trainer.runtime import apply
from trainer.runtime.info import BuildContext, Info, Runtime
from trainer.runtime.validation import ClusterView, Verdict
from trainer.runtime.watch import CONFIG_MAPS, ByLabel, Obj, Store, Watch

ANNOTATION_LEVEL = "example.org/tuning-level"
LABEL_PROFILE_FOR = "example.org/tuning-for"
ENV_LEVEL = "TUNING_LEVEL"
ENV_PROFILE = "TUNING_PROFILE"
PATH_LEVEL = f"metadata.annotations[{ANNOTATION_LEVEL}]"
LEVELS = ("1", "2", "3")
WATCH_PROFILES = "tuning-profiles"


def level(trainjob: TrainJob) -> str | None:
    """The tuning level, or None when the policy is off for this TrainJob."""
    annotations = (trainjob.metadata.annotations if trainjob.metadata else None) or {}
    return annotations.get(ANNOTATION_LEVEL)


def _profile(store: Store, trainjob: TrainJob, runtime: Runtime) -> Obj | None:
    """The ConfigMap labelled for this TrainJob, in its namespace (None: none yet)."""
    meta = trainjob.metadata
    name = (meta.name if meta else None) or ""
    for config_map in store.list((meta.namespace if meta else None) or "default"):
        labels = (config_map.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_PROFILE_FOR) == name:
            return config_map
    return None


PROFILES = Watch(
    WATCH_PROFILES,
    CONFIG_MAPS,
    ByLabel(LABEL_PROFILE_FOR),
    _profile,
    label_selector=LABEL_PROFILE_FOR,
)


class TuningPlugin:
    name = "Tuning"

    def watches(self, ctx: BuildContext) -> Sequence[Watch]:
        return [PROFILES]

    def reserved_envs(self, info: Info) -> Sequence[str]:
        return (ENV_LEVEL, ENV_PROFILE) if level(info.trainjob) is not None else ()

    def validate(self, info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
        value = level(info.trainjob)
        if value is None or value in LEVELS:
            return Verdict()
        message = f"must be one of {', '.join(LEVELS)}"
        return Verdict([], [FieldError(PATH_LEVEL, INVALID, message, value)])

    def enforce_ml_policy(self, info: Info) -> None:
        value = level(info.trainjob)
        ps = info.trainer_pod_set()
        node = ps.container(c.CONTAINER_NODE) if ps is not None else None
        if value is None or node is None:
            return
        envs = [apply.env(ENV_LEVEL, value)]
        profile = info.observed.watched.get(WATCH_PROFILES)
        if profile is not None:
            envs.append(apply.env(ENV_PROFILE, str((profile.get("data") or {}).get("profile"))))
        apply.upsert_env(node, envs)
