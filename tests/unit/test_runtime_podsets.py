"""The pod-set rules the plugins share (trainer/runtime/podsets.py): ``trainer.numNodes`` is
applied once, when the Info is assembled, by the runtime's ML policy; and what one node has,
read two ways (MPI passes over a candidate that declares no resources)."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders as b
from trainer.api import constants as c
from trainer.runtime.assemble import new_info
from trainer.runtime.info import Info
from trainer.runtime.podsets import resources_per_node

GPUS = {"limits": {"nvidia.com/gpu": 4}}


def info(policy: dict[str, Any] | None, jobs: list[dict[str, Any]], **trainer: Any) -> Info:
    fields: dict[str, Any] = {"replicated_jobs": jobs}
    if policy is not None:
        fields["ml_policy"] = {"numNodes": 2, **policy}
    runtime = b.cluster_runtime_model("rt", **fields)
    job = b.trainjob_model("j", runtime="rt", trainer=trainer or None)
    return new_info(job, runtime)


def counts(i: Info) -> dict[str, int]:
    return {ps.name: ps.count for ps in i.pod_sets}


MPI_JOBS = [
    b.replicated_job(c.JOB_LAUNCHER, containers=[b.container("node")]),
    b.replicated_job(c.JOB_NODE, ancestor=None, containers=[b.container("node", resources=GPUS)]),
]


@pytest.mark.parametrize(
    ("policy", "jobs", "expected"),
    [
        # No ML policy (PlainML): every trainer-step job gets numNodes; others keep parallelism.
        (
            None,
            [b.replicated_job("a"), b.replicated_job("b"), b.replicated_job("x", ancestor=None)],
            {"a": 5, "b": 5, "x": 1},
        ),
        ({"jax": {}}, [b.replicated_job("a"), b.replicated_job("b")], {"a": 5, "b": 5}),
        # Torch: the first trainer-step job only.
        ({"torch": {}}, [b.replicated_job("a"), b.replicated_job("b")], {"a": 5, "b": 2}),
        # MPI: the job named node; the launcher keeps the runtime's count.
        ({"mpi": {}}, MPI_JOBS, {"launcher": 2, "node": 5}),
        ({"mpi": {"runLauncherAsNode": True}}, MPI_JOBS, {"launcher": 2, "node": 4}),
    ],
)
def test_num_nodes_is_applied_when_the_info_is_assembled(
    policy: dict[str, Any] | None, jobs: list[dict[str, Any]], expected: dict[str, int]
) -> None:
    assert counts(info(policy, jobs, numNodes=5)) == expected


def test_without_num_nodes_the_runtime_counts_stay() -> None:
    assert counts(info({"torch": {}}, [b.replicated_job("a")])) == {"a": 2}
    assert counts(info({"mpi": {}}, MPI_JOBS)) == {"launcher": 2, "node": 1}


def test_mpi_passes_over_a_node_container_without_resources() -> None:
    """The launcher (trainer ancestor, first in template order) declares no resources: the
    first-candidate reading stops there, MPI's reading finds the GPUs of job node."""
    i = info({"mpi": {}}, MPI_JOBS)
    assert resources_per_node(i) is None
    found = resources_per_node(i, skip_undeclared=True)
    assert found is not None and found.limits == {"nvidia.com/gpu": 4}


def test_the_trainjob_resources_per_node_win_wholesale_either_way() -> None:
    i = info({"mpi": {}}, MPI_JOBS, resourcesPerNode={"limits": {"cpu": "3"}})
    for skip in (False, True):
        found = resources_per_node(i, skip_undeclared=skip)
        assert found is not None and found.limits == {"cpu": "3"}
