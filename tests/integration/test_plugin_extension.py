"""A plugin the framework has never seen (tests/plugins/tuning.py, registered only here) takes
part in every phase it implements: render injects its env, admission applies its rules (its
reserved names joined with the other plugins' into one error), and a controller on the local API
server builds the caches and event handlers its watch declares, re-queues the TrainJob when the
observed ConfigMap appears, and puts the ConfigMap's value into the JobSet. No module of
``trainer/`` knows the plugin: that is the point."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.builders import trainjob
from tests.integration.harness import Plane, local_plane
from tests.integration.test_controller import KEYS, conditions
from tests.integration.test_controller_flows import Observer, container, running
from tests.plugins.tuning import ANNOTATION_LEVEL, LABEL_PROFILE_FOR, TuningPlugin
from trainer.admission.trainjob import validate_trainjob
from trainer.admission.types import ClusterView
from trainer.api.v1alpha1 import TrainJob
from trainer.controller.manager import Controller
from trainer.kube import resources as r
from trainer.machinery.errors import INVALID
from trainer.plugins.registry import default_framework, default_plugins, render
from trainer.runtime.builtin import builtin_runtimes
from trainer.runtime.framework import Framework
from trainer.runtime.info import BuildContext, Observed

FRAMEWORK = Framework([*default_plugins(), TuningPlugin()])
RUNTIME = builtin_runtimes()["torch-distributed"]


def tuned(name: str = "tuned", level: str = "2", **spec: Any) -> dict[str, Any]:
    job = trainjob(name, **spec)
    job["metadata"]["annotations"] = {ANNOTATION_LEVEL: level}
    return job


def profile(trainjob_name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{trainjob_name}-tuning",
            "namespace": "default",
            "labels": {LABEL_PROFILE_FOR: trainjob_name},
        },
        "data": {"profile": value},
    }


def node_env(jobset: dict[str, Any] | None) -> dict[str, str]:
    """Container ``node``'s literal env in the JobSet's ``node`` job."""
    if jobset is None:
        return {}
    env = container(jobset, "node", "node").get("env") or []
    return {e["name"]: e["value"] for e in env if "value" in e}


def rendered_jobset(job: dict[str, Any], observed: Observed, framework: Framework) -> Any:
    objects = render(
        TrainJob.from_wire(job),
        RUNTIME,
        observed=observed,
        ctx=BuildContext(ssh_keygen=lambda: KEYS),
        framework=framework,
    )
    return next(o for o in objects if o["kind"] == "JobSet")


# --- the phases, pure ----------------------------------------------------------------------------
def test_the_plugin_joins_each_phase_it_implements() -> None:
    phases = FRAMEWORK.phases()
    joined = sorted(phase for phase, names in phases.items() if "Tuning" in names)
    assert joined == ["EnforceMLPolicy", "ReservedEnvs", "Validate", "Watch"]
    assert [w.name for w in FRAMEWORK.watches(BuildContext())][-1] == "tuning-profiles"


def test_render_injects_the_env_from_the_field_and_the_observed_config_map() -> None:
    observed = Observed(watched={"tuning-profiles": profile("tuned", "fast")})
    env = node_env(rendered_jobset(tuned(trainer={"numNodes": 2}), observed, FRAMEWORK))
    assert env["TUNING_LEVEL"] == "2"
    assert env["TUNING_PROFILE"] == "fast"
    assert env["PET_NNODES"] == "2"  # the other plugins ran as before
    # Not observed yet: the level only. Not registered: nothing.
    assert "TUNING_PROFILE" not in node_env(rendered_jobset(tuned(), Observed(), FRAMEWORK))
    plain = node_env(rendered_jobset(tuned(), observed, default_framework()))
    assert not {"TUNING_LEVEL", "TUNING_PROFILE"} & set(plain)


def admit(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    verdict = validate_trainjob(
        TrainJob.from_wire(job), None, ClusterView(runtime=RUNTIME), framework=FRAMEWORK
    )
    return [(e.path, e.type, e.message) for e in verdict.errors]


def test_admission_applies_the_plugins_rules() -> None:
    assert admit(tuned(level="3")) == []
    assert admit(tuned(level="7")) == [
        ("metadata.annotations[example.org/tuning-level]", INVALID, "must be one of 1, 2, 3")
    ]
    # Its reserved names join Torch's in the one reserved-env error.
    env = [{"name": "TUNING_PROFILE", "value": "x"}, {"name": "PET_NNODES", "value": "2"}]
    assert admit(tuned(trainer={"env": env})) == [
        (
            "spec.trainer.env",
            INVALID,
            "must not have reserved envs, invalid envs configured: [PET_NNODES TUNING_PROFILE]",
        )
    ]
    # Without the annotation the policy is off: its names are free.
    plain = trainjob("plain", trainer={"env": [{"name": "TUNING_PROFILE", "value": "x"}]})
    assert admit(plain) == []


# --- the controller ---------------------------------------------------------------------------
@pytest.fixture
async def plane() -> AsyncIterator[Plane]:
    async with local_plane() as p:
        yield p


async def test_the_controller_watches_what_the_plugin_declares(plane: Plane) -> None:
    observer = Observer()
    ctl = Controller(
        plane.kube, ssh_keygen=lambda: KEYS, reconcile_metrics=observer, framework=FRAMEWORK
    )
    for informer in ctl.informers():
        informer.add_handler(observer.poke)
    async with running(plane, (ctl, observer)) as run:
        # Suspended (queued, as under Kueue): its JobSet follows the build; a running one is
        # left as it is, whatever plugin changes.
        await plane.kube.create(tuned(suspend=True))
        jobset = await run.until(lambda: plane.jobset("default", "tuned"), what="JobSet")
        env = node_env(jobset)
        assert env["TUNING_LEVEL"] == "2" and "TUNING_PROFILE" not in env

        # The profile appears: its event maps to the TrainJob by label, and the JobSet (nothing
        # active) is recreated with the profile's value.
        await plane.kube.create(profile("tuned", "fast"), gvr=r.CONFIGMAPS)
        jobset = await run.until(
            lambda: (
                node_env(plane.jobset("default", "tuned")).get("TUNING_PROFILE") == "fast"
                and plane.jobset("default", "tuned")
            ),
            what="JobSet with the tuning profile",
        )
        assert node_env(jobset)["TUNING_LEVEL"] == "2"
        assert conditions(plane.trainjob("default", "tuned")).get("BuildFailed") is None

        # A ConfigMap labelled for another TrainJob does not touch this one.
        profiles = ctl.caches.watched["tuning-profiles"]
        await plane.kube.create(profile("someone-else", "slow"), gvr=r.CONFIGMAPS)
        await run.settle(profiles)
        assert profiles.get("default", "someone-else-tuning") is not None
        after = plane.jobset("default", "tuned")
        assert after is not None
        assert after["metadata"]["resourceVersion"] == jobset["metadata"]["resourceVersion"]
