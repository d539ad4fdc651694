"""The Watch phase's pure parts: what declared watches put into a build's Observed
(trainer.runtime.watch.observe), which declarations are refused, and the event -> TrainJob key
handlers the controller builds from them (trainer.controller.handlers)."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders as b
from trainer.api.v1alpha1 import TrainJob
from trainer.controller.handlers import handler_for
from trainer.runtime.builtin import builtin_runtimes
from trainer.runtime.info import Observed, Runtime
from trainer.runtime.watch import (
    CONFIG_MAPS,
    SECRETS,
    ByLabel,
    ByOwner,
    Obj,
    Store,
    TrainJobsMatching,
    Watch,
    check_watches,
    observe,
)

JOB = b.trainjob_model(namespace="ns", runtime="rt")
RUNTIME = builtin_runtimes()["torch-distributed"]


class Objects:
    """A Store over a list of objects, and a stand-in for the TrainJob cache."""

    def __init__(self, *objs: Obj) -> None:
        self.objs = list(objs)

    def get(self, namespace: str | None, name: str) -> Obj | None:
        return next(
            (o for o in self.objs if key(o) == ((namespace or ""), name)),
            None,
        )

    def list(self, namespace: str | None = None) -> list[Obj]:
        return [o for o in self.objs if namespace is None or key(o)[0] == namespace]


def key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name"))


def obj(name: str, namespace: str = "ns", **meta: Any) -> Obj:
    return {"metadata": {"name": name, "namespace": namespace, **meta}}


def named(name: str) -> Any:
    def collect(store: Store, trainjob: TrainJob, runtime: Runtime) -> Any:
        found = store.get("ns", name)
        return {name: found} if found is not None else {}

    return collect


def single(name: str) -> Any:
    def collect(store: Store, trainjob: TrainJob, runtime: Runtime) -> Any:
        return store.get("ns", name)

    return collect


def test_watches_fill_their_fields_merging_maps_and_keeping_the_first_object() -> None:
    a = Watch("a", SECRETS, ByOwner(), named("s1"), into="secrets")
    b = Watch("b", SECRETS, ByOwner(), named("s2"), into="secrets")
    pg1 = Watch("pg1", CONFIG_MAPS, ByOwner(), single("missing"), into="pod_group")
    pg2 = Watch("pg2", CONFIG_MAPS, ByOwner(), single("pg"), into="pod_group")
    pg3 = Watch("pg3", CONFIG_MAPS, ByOwner(), single("other"), into="pod_group")
    free = Watch("free", CONFIG_MAPS, ByOwner(), single("pg"))
    store = Objects(obj("s1"), obj("s2"), obj("pg"), obj("other"))
    stores = {w.name: store for w in (a, b, pg1, pg2, pg3, free)}
    base = Observed(secrets={"kept": {"k": 1}})
    out = observe([a, b, pg1, pg2, pg3, free], stores, JOB, RUNTIME, base)
    assert sorted(out.secrets) == ["kept", "s1", "s2"]
    assert out.pod_group == obj("pg")
    assert out.watched == {"free": obj("pg")}
    assert base.secrets == {"kept": {"k": 1}}  # the base is not changed


def test_duplicate_declarations_collapse_and_conflicting_ones_are_refused() -> None:
    a = Watch("a", SECRETS, ByOwner(), named("s1"), into="secrets")
    assert check_watches([a, a]) == [a]
    other = Watch("a", CONFIG_MAPS, ByOwner(), named("s1"), into="secrets")
    with pytest.raises(ValueError, match="two different watches are named 'a'"):
        check_watches([a, other])
    with pytest.raises(ValueError, match="Observed has no field 'nope'"):
        check_watches([Watch("x", SECRETS, ByOwner(), named("s"), into="nope")])


def run(rule: Any, event: Obj, *trainjobs: Obj) -> list[str]:
    keys: list[str] = []
    handler = handler_for(rule, keys.append, Objects(*trainjobs), lambda _job: None)  # type: ignore[arg-type]
    handler("ADDED", event, None)
    return keys


def owned_by(name: str, kind: str = "TrainJob") -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": kind,
            "name": name,
            "uid": "u",
            "controller": True,
        }
    ]


def test_by_owner_maps_to_the_controlling_trainjob_only() -> None:
    assert run(ByOwner(), obj("x", ownerReferences=owned_by("job"))) == ["ns/job"]
    assert run(ByOwner(), obj("x", ownerReferences=owned_by("job", kind="JobSet"))) == []
    assert run(ByOwner(), obj("x")) == []


def test_by_label_maps_to_the_named_trainjob_in_the_objects_namespace() -> None:
    assert run(ByLabel("for"), obj("x", labels={"for": "job"})) == ["ns/job"]
    assert run(ByLabel("for"), obj("x", labels={"other": "job"})) == []


def test_matching_scans_the_trainjobs_in_scope() -> None:
    jobs = [obj("a"), obj("b", annotations={"pick": "yes"}), obj("c", namespace="elsewhere")]

    def picked(_o: Obj, job: Obj, _rt: Obj | None) -> bool:
        return "pick" in (job["metadata"].get("annotations") or {}) or job is jobs[2]

    assert run(TrainJobsMatching(picked), obj("x"), *jobs) == ["ns/b"]
    wide = TrainJobsMatching(picked, same_namespace=False)
    assert run(wide, obj("x"), *jobs) == ["ns/b", "elsewhere/c"]
