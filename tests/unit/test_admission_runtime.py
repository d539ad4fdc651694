"""Admission of TrainingRuntimes and ClusterTrainingRuntimes (kubeflow/trainer#3686): the
replicated-job rules on create and update for both kinds, the deprecation warning, and this
project's warnings for data-cache success policies and MPI runLauncherAsNode."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.admission.runtime import validate_runtime
from trainer.api import constants as c
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime
from trainer.machinery.errors import INVALID
from trainer.runtime.builtin import builtin_runtimes

AnyRuntime = TrainingRuntime | ClusterTrainingRuntime
Err = tuple[str, str, str]
KINDS = (TrainingRuntime, ClusterTrainingRuntime)


def job(
    name: str,
    ancestor: str | None = None,
    containers: tuple[str, ...] = ("node",),
    init_containers: tuple[str, ...] = (),
    **extra: Any,
) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [{"name": n, "image": "img"} for n in containers]}
    if init_containers:
        pod["initContainers"] = [{"name": n, "image": "img"} for n in init_containers]
    template: dict[str, Any] = {"spec": {"template": {"spec": pod}}}
    if ancestor is not None:
        template["metadata"] = {"labels": {c.LABEL_ANCESTOR: ancestor}}
    return {"name": name, "template": template, **extra}


def make(
    jobs: list[dict[str, Any]],
    kind: type[AnyRuntime] = ClusterTrainingRuntime,
    labels: dict[str, str] | None = None,
    ml_policy: dict[str, Any] | None = None,
    success_policy: dict[str, Any] | None = None,
) -> AnyRuntime:
    spec: dict[str, Any] = {"replicatedJobs": jobs}
    if success_policy is not None:
        spec["successPolicy"] = success_policy
    body: dict[str, Any] = {"template": {"spec": spec}}
    if ml_policy is not None:
        body["mlPolicy"] = ml_policy
    meta: dict[str, Any] = {"name": "rt"}
    if labels:
        meta["labels"] = labels
    if kind is TrainingRuntime:
        meta["namespace"] = "team"
    return kind.from_wire(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": kind.__name__,
            "metadata": meta,
            "spec": body,
        }
    )


def errors_of(rt: AnyRuntime, old: AnyRuntime | None = None) -> list[Err]:
    return [(e.path, e.type, e.message) for e in validate_runtime(rt, old).errors]


def replicas_error(i: int) -> Err:
    return (f"spec.template.spec.replicatedJobs[{i}].replicas", INVALID, "always must be 1")


def container_error(i: int, ancestor: str) -> Err:
    return (
        f"spec.template.spec.replicatedJobs[{i}].template.spec.template.spec.containers",
        INVALID,
        f"must contain the required container for the ancestor: {ancestor}",
    )


# --- Replicated jobs -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("jobs", "want"),
    [
        pytest.param([job("node", "trainer")], [], id="trainer-default-replicas"),
        pytest.param([job("node", "trainer", replicas=1)], [], id="trainer-one-replica"),
        pytest.param(
            [job("node", "trainer", replicas=2)], [replicas_error(0)], id="trainer-two-replicas"
        ),
        pytest.param(
            [job("node", "trainer", replicas=0)], [replicas_error(0)], id="trainer-zero-replicas"
        ),
        pytest.param(
            [job("node", "trainer", containers=("main",))],
            [container_error(0, "trainer")],
            id="trainer-without-node",
        ),
        pytest.param(
            [job("node", "trainer", containers=("main",), init_containers=("node",))],
            [container_error(0, "trainer")],
            id="init-container-does-not-count",
        ),
        pytest.param(
            [
                job("d", "dataset-initializer", containers=("dataset-initializer",)),
                job("m", "model-initializer", containers=("model-initializer", "side")),
                job("cache", "cache-initializer", containers=("cache-initializer",)),
                job("node", "trainer"),
            ],
            [],
            id="every-step-with-its-container",
        ),
        pytest.param(
            [
                job("d", "dataset-initializer", containers=("node",), replicas=2),
                job("m", "model-initializer", containers=("dataset-initializer",)),
                job("cache", "cache-initializer", containers=("cache",), replicas=3),
                job("node", "trainer"),
            ],
            [
                replicas_error(0),
                container_error(0, "dataset-initializer"),
                container_error(1, "model-initializer"),
                replicas_error(2),
                container_error(2, "cache-initializer"),
            ],
            id="every-error-collected",
        ),
        pytest.param(
            [
                job("aux", "sidecar", containers=("x",), replicas=4),
                job("worker", None, containers=("x",), replicas=2),
                job("node", "trainer"),
            ],
            [],
            id="unknown-or-no-ancestor-ignored",
        ),
        pytest.param([], [], id="no-jobs"),
    ],
)
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("update", [False, True], ids=["create", "update"])
def test_replicated_jobs(
    jobs: list[dict[str, Any]], want: list[Err], kind: type[AnyRuntime], update: bool
) -> None:
    """Both kinds, on create and update (upstream skips update for TrainingRuntime, #3686)."""
    rt = make(jobs, kind)
    old = make([job("node", "trainer")], kind) if update else None
    assert errors_of(rt, old) == want


def test_error_value_is_what_was_found() -> None:
    rt = make([job("node", "trainer", containers=("a", "b"), replicas=3)])
    values = {e.path: e.value for e in validate_runtime(rt, None).errors}
    assert values == {
        "spec.template.spec.replicatedJobs[0].replicas": 3,
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers": ["a", "b"],
    }


def test_job_without_pod_template_has_no_container() -> None:
    rt = ClusterTrainingRuntime.from_wire(
        {
            "metadata": {"name": "rt"},
            "spec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {"metadata": {"labels": {c.LABEL_ANCESTOR: "trainer"}}},
                            }
                        ]
                    }
                }
            },
        }
    )
    assert errors_of(rt) == [container_error(0, "trainer")]


# --- Built-in runtimes ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(builtin_runtimes()))
def test_builtin_runtimes_pass(name: str) -> None:
    rt = builtin_runtimes()[name]
    for old in (None, rt):
        verdict = validate_runtime(rt, old)
        assert verdict.errors == []
        assert verdict.warnings == []


# --- Deprecation ---------------------------------------------------------------------------------
DEPRECATED = {c.LABEL_SUPPORT: c.SUPPORT_DEPRECATED}
DEPRECATION_WARNING = (
    'ClusterTrainingRuntime "rt" is deprecated and will be removed in a future release of '
    "Kubeflow Trainer. See runtime deprecation policy: "
    "https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html"
    "#runtime-deprecation-policy"
)


@pytest.mark.parametrize(
    ("kind", "labels", "update", "want"),
    [
        pytest.param(ClusterTrainingRuntime, DEPRECATED, False, [DEPRECATION_WARNING], id="ctr"),
        pytest.param(ClusterTrainingRuntime, DEPRECATED, True, [], id="ctr-update"),
        pytest.param(ClusterTrainingRuntime, {c.LABEL_SUPPORT: "stable"}, False, [], id="other"),
        pytest.param(ClusterTrainingRuntime, None, False, [], id="unlabelled"),
        pytest.param(TrainingRuntime, DEPRECATED, False, [], id="namespaced"),
    ],
)
def test_deprecation_warning(
    kind: type[AnyRuntime], labels: dict[str, str] | None, update: bool, want: list[str]
) -> None:
    rt = make([job("node", "trainer")], kind, labels)
    verdict = validate_runtime(rt, rt if update else None)
    assert verdict.warnings == want
    assert verdict.errors == []


# --- Data cache success policy -------------------------------------------------------------------
CACHE_JOBS = [
    job("cache-initializer", "cache-initializer", containers=("cache-initializer",)),
    job("node", "trainer"),
]
CACHE_WARNING = (
    'ClusterTrainingRuntime "rt" has the data cache job "cache-initializer", but '
    "spec.template.spec.successPolicy does not target the trainer job alone: the cache keeps "
    "serving until the JobSet is finished, so a TrainJob on this runtime would never complete "
    "while the cache runs. Set successPolicy to {operator: All, targetReplicatedJobs: [node]}"
)


@pytest.mark.parametrize(
    ("policy", "warns"),
    [
        pytest.param({"operator": "All", "targetReplicatedJobs": ["node"]}, False, id="all-node"),
        pytest.param(
            {"operator": "Any", "targetReplicatedJobs": ["node", "cache-initializer"]},
            False,
            id="any-node-or-cache",
        ),
        pytest.param({"operator": "Any"}, False, id="any-every-job"),
        pytest.param(None, True, id="no-policy"),
        pytest.param({"operator": "All"}, True, id="all-every-job"),
        pytest.param(
            {"operator": "All", "targetReplicatedJobs": ["node", "cache-initializer"]},
            True,
            id="all-node-and-cache",
        ),
        pytest.param(
            {"operator": "Any", "targetReplicatedJobs": ["cache-initializer"]},
            True,
            id="any-cache-only",
        ),
    ],
)
def test_cache_success_policy_warning(policy: dict[str, Any] | None, warns: bool) -> None:
    verdict = validate_runtime(make(CACHE_JOBS, success_policy=policy), None)
    assert verdict.warnings == ([CACHE_WARNING] if warns else [])
    assert verdict.errors == []


def test_no_cache_no_success_policy_warning() -> None:
    assert validate_runtime(make([job("node", "trainer")]), None).warnings == []


def test_cache_warning_on_update_and_namespaced_kind() -> None:
    rt = make(CACHE_JOBS, TrainingRuntime)
    warnings = validate_runtime(rt, rt).warnings
    assert len(warnings) == 1
    assert warnings[0].startswith('TrainingRuntime "rt" has the data cache job')


# --- MPI runLauncherAsNode -----------------------------------------------------------------------
def mpi(run_launcher_as_node: bool) -> dict[str, Any]:
    return {"numNodes": 1, "mpi": {"runLauncherAsNode": run_launcher_as_node}}


@pytest.mark.parametrize(
    ("jobs", "as_node", "want"),
    [
        pytest.param([job("launcher", "trainer"), job("node")], True, None, id="both-jobs"),
        pytest.param([job("node", "trainer")], False, None, id="not-as-node"),
        pytest.param([job("node", "trainer")], True, '"launcher"', id="no-launcher"),
        pytest.param([job("launcher", "trainer")], True, '"node"', id="no-node"),
        pytest.param([job("trainer", "trainer")], True, '"launcher" and "node"', id="neither"),
    ],
)
def test_mpi_run_launcher_as_node_warning(
    jobs: list[dict[str, Any]], as_node: bool, want: str | None
) -> None:
    verdict = validate_runtime(make(jobs, ml_policy=mpi(as_node)), None)
    assert verdict.errors == []
    if want is None:
        assert verdict.warnings == []
    else:
        assert verdict.warnings == [
            'ClusterTrainingRuntime "rt" sets spec.mlPolicy.mpi.runLauncherAsNode but has no '
            f"replicated job {want}: TrainJobs with spec.trainer.numNodes >= 2 on it will be "
            'rejected. Add both a "launcher" and a "node" job, or unset runLauncherAsNode'
        ]


def test_warnings_and_errors_together() -> None:
    rt = make(
        [job("node", "trainer", replicas=2)],
        labels=DEPRECATED,
        ml_policy=mpi(True),
    )
    verdict = validate_runtime(rt, None)
    assert verdict.warnings[0] == DEPRECATION_WARNING
    assert len(verdict.warnings) == 2
    assert [(e.path, e.message) for e in verdict.errors] == [
        ("spec.template.spec.replicatedJobs[0].replicas", "always must be 1")
    ]
    assert not verdict.allowed


def test_every_warning_in_order_deprecation_cache_mpi() -> None:
    """The plugins' runtime warnings (ValidateRuntime phase) follow the deprecation warning in
    the order admission has always given them: the data cache's, then MPI's."""
    rt = make(CACHE_JOBS, labels=DEPRECATED, ml_policy=mpi(True))
    warnings = validate_runtime(rt, None).warnings
    assert warnings[:2] == [DEPRECATION_WARNING, CACHE_WARNING]
    assert len(warnings) == 3
    assert "runLauncherAsNode" in warnings[2]


# --- A JobSet TTL in the template (docs/lifecycle.md) ------------------------------------------
def test_a_jobset_ttl_in_the_template_warns_and_points_at_the_run_policy() -> None:
    rt = make([job("node", "trainer")])
    assert validate_runtime(rt, None).warnings == []
    with_ttl = rt.model_copy(deep=True)
    assert with_ttl.spec is not None and with_ttl.spec.template.spec is not None
    with_ttl.spec.template.spec.ttl_seconds_after_finished = 60
    verdict = validate_runtime(with_ttl, None)
    assert verdict.errors == []
    assert verdict.warnings == [
        "spec.template.spec.ttlSecondsAfterFinished: JobSet deletes each JobSet 60s after it "
        "finishes, and a TrainJob whose finish the controller has not seen by then gets a new "
        "JobSet, running the training again; set spec.runPolicy.ttlSecondsAfterFinished "
        "instead, which deletes the finished TrainJob and everything it owns"
    ]
