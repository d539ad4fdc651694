"""The plugin order, and the numeric rules of the JAX and XGBoost plugins."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders as b
from trainer.api.v1alpha1 import ClusterTrainingRuntime
from trainer.plugins.jax import JAXPlugin
from trainer.plugins.registry import default_framework, default_plugins, render
from trainer.runtime.framework import PHASES, Framework


def test_plugins_run_in_a_fixed_declared_order() -> None:
    """Each phase runs its plugins in the order the registry declares them; derived from the
    registry, so adding a plugin needs no edit here."""
    plugins = default_plugins(trainjob_status=True)
    phases = default_framework(trainjob_status=True).phases()
    assert list(phases) == list(PHASES)
    for phase, protocol in PHASES.items():
        assert phases[phase] == [p.name for p in plugins if isinstance(p, protocol)], phase
    # What the order is for: the JobSet is built last (it mounts what the others build).
    assert phases["PreBuild"][-1] == phases["Build"][-1] == "JobSet"


def test_every_registered_plugin_takes_part_in_a_phase() -> None:
    """A plugin in no phase is a misspelt method (the Protocols are structural)."""
    phases = default_framework(trainjob_status=True).phases()
    idle = [
        p.name
        for p in default_plugins(trainjob_status=True)
        if not any(p.name in names for names in phases.values())
    ]
    assert idle == []


def test_plugin_names_are_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        Framework([JAXPlugin(), JAXPlugin()])


def runtime(
    policy: dict[str, Any], resources: dict[str, Any] | None = None
) -> ClusterTrainingRuntime:
    extra: dict[str, Any] = {"resources": resources} if resources else {}
    node = b.container("node", **extra)
    return b.cluster_runtime_model(
        "rt",
        ml_policy={"numNodes": 1, **policy},
        replicated_jobs=[b.replicated_job(containers=[node])],
    )


def env_of(trainjob: dict[str, Any], rt: ClusterTrainingRuntime) -> dict[str, Any]:
    job = b.trainjob_model("j", namespace="ns", runtime="rt", **trainjob)
    jobset = render(job, rt)[-1]
    ctr = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][
        0
    ]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in ctr.get("env", [])}


@pytest.mark.parametrize(
    ("nodes", "resources", "workers"),
    [
        (2, {"limits": {"nvidia.com/gpu": 4}}, "8"),
        (3, None, "3"),
        (1, {"requests": {"amd.com/gpu": 2}}, "2"),
        (5, {"requests": {"cpu": "8"}}, "5"),
    ],
)
def test_dmlc_num_worker_is_nodes_times_gpus(
    nodes: int, resources: dict[str, Any] | None, workers: str
) -> None:
    trainer: dict[str, Any] = {"numNodes": nodes}
    if resources:
        trainer["resourcesPerNode"] = resources
    env = env_of({"trainer": trainer}, runtime({"xgboost": {}}))
    assert env["DMLC_NUM_WORKER"] == workers
    assert env["DMLC_TRACKER_URI"] == "j-node-0-0.j"
    assert env["DMLC_TRACKER_PORT"] == "29500"


def test_jax_env_ignores_gpus() -> None:
    env = env_of(
        {"trainer": {"numNodes": 4, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}},
        runtime({"jax": {}}),
    )
    assert env["JAX_NUM_PROCESSES"] == "4"
    assert env["JAX_COORDINATOR_ADDRESS"] == "j-node-0-0.j:29500"
    assert env["JAX_PROCESS_ID"] == {
        "fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        }
    }


def test_no_rendezvous_env_without_spec_trainer() -> None:
    policies: list[dict[str, Any]] = [{"torch": {}}, {"jax": {}}, {"xgboost": {}}]
    for policy in policies:
        assert env_of({}, runtime(policy)) == {}


def test_an_invalid_quantity_is_a_build_error_not_a_crash() -> None:
    from trainer.runtime.info import BuildError  # noqa: PLC0415

    rt = runtime({"xgboost": {}})
    job = b.trainjob_model(
        "j",
        namespace="ns",
        runtime="rt",
        trainer={"resourcesPerNode": {"limits": {"nvidia.com/gpu": "lots"}}},
    )
    with pytest.raises(BuildError, match="invalid resource quantity: 'lots' is not a quantity"):
        render(job, rt)


def test_non_string_kind_is_an_object_error() -> None:
    from trainer.api.load import ObjectError, parse_object  # noqa: PLC0415

    with pytest.raises(ObjectError, match="kind: Invalid value"):
        parse_object({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": ["TrainJob"]})
