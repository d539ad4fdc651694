"""runtimePatches admission rules (trainer.admission.patches): the manager's domain-prefixed
path, patches naming only jobs and containers of the runtime, no env on the reserved
containers, and the suspend / active-JobSet mutability rule."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
import yaml

from tests import builders as b
from trainer.admission import patches
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainJob
from trainer.jobset.types import JobSet
from trainer.machinery.errors import FORBIDDEN, INVALID, REQUIRED, FieldError
from trainer.machinery.names import domain_prefixed_path_errors

trainjob = partial(b.trainjob_model, namespace="ns", runtime="rt")

RUNTIME = ClusterTrainingRuntime.from_wire(
    yaml.safe_load(
        """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: rt}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: dataset-initializer
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}
            spec:
              template:
                spec:
                  containers: [{name: dataset-initializer, image: init}]
        - name: node
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  initContainers: [{name: setup, image: setup}]
                  containers:
                    - {name: node, image: trainer}
                    - {name: sidecar, image: sidecar}
"""
    )
)

P0 = "spec.runtimePatches[0]"
JOBS = f"{P0}.trainingRuntimeSpec.template.spec.replicatedJobs"


def job_patch(name: str, pod: dict[str, Any] | None = None) -> dict[str, Any]:
    job: dict[str, Any] = {"name": name}
    if pod is not None:
        job["template"] = {"spec": {"template": {"spec": pod}}}
    return job


def patch(
    manager: str = "acme.io/manager",
    jobs: list[dict[str, Any]] | None = None,
    time: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {"manager": manager}
    if time is not None:
        out["time"] = time
    if jobs is not None:
        out["trainingRuntimeSpec"] = {"template": {"spec": {"replicatedJobs": jobs}}}
    return out


def brief(errors: list[FieldError]) -> list[tuple[str, str, str]]:
    return [(e.path, e.type, e.message) for e in errors]


# --- manager: IsDomainPrefixedPath ---------------------------------------------------------------
NOT_DOMAIN_PREFIXED = 'must be a domain-prefixed path (such as "acme.io/foo")'
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
PATH_MSG = "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')"


@pytest.mark.parametrize(
    ("manager", "expected"),
    [
        ("acme.io/manager", []),
        ("kueue.x-k8s.io/manager", []),
        ("example.io/platform-team", []),
        ("acme.io/a/b:c", []),
        ("kueue.k8s.io/", [(INVALID, NOT_DOMAIN_PREFIXED, "kueue.k8s.io/")]),
        ("manager", [(INVALID, NOT_DOMAIN_PREFIXED, "manager")]),
        ("/manager", [(INVALID, NOT_DOMAIN_PREFIXED, "/manager")]),
        ("Acme.io/manager", [(INVALID, SUBDOMAIN_MSG, "Acme.io")]),
        ("acme.io/man ager", [(INVALID, PATH_MSG, "man ager")]),
        ("", [(REQUIRED, "", None)]),
    ],
)
def test_domain_prefixed_path(manager: str, expected: list[tuple[str, str, str | None]]) -> None:
    errors = domain_prefixed_path_errors("x", manager)
    got = [(e.type, e.message, e.value if e.has_value else None) for e in errors]
    assert got == expected
    assert all(e.path == "x" for e in errors)


def test_too_long_domain_reports_length_and_format() -> None:
    host = "a" * 254
    errors = domain_prefixed_path_errors("x", f"{host}/m")
    assert [e.message for e in errors] == ["must be no more than 253 characters"]


def test_manager_error_is_reported_at_the_patch_index() -> None:
    tj = trainjob(runtime_patches=[patch("acme.io/ok"), patch("kueue.k8s.io/")])
    errors = patches.validate_patch_content(tj, RUNTIME)
    assert brief(errors) == [
        ("spec.runtimePatches[1].manager", INVALID, NOT_DOMAIN_PREFIXED),
    ]


# --- content rules -------------------------------------------------------------------------------
CONTENT_CASES: list[tuple[str, list[dict[str, Any]], list[tuple[str, str, str]]]] = [
    (
        "kueue empty patch",
        [{"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}],
        [],
    ),
    (
        "node selector on an existing job",
        [patch(jobs=[job_patch("node", {"nodeSelector": {"pool": "a"}})])],
        [],
    ),
    (
        "env on a non-reserved container",
        [
            patch(
                jobs=[
                    job_patch("node", {"containers": [{"name": "sidecar", "env": [{"name": "A"}]}]})
                ]
            )
        ],
        [],
    ),
    (
        "volume mounts on node (no env)",
        [
            patch(
                jobs=[
                    job_patch(
                        "node",
                        {
                            "containers": [
                                {"name": "node", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}
                            ]
                        },
                    )
                ]
            )
        ],
        [],
    ),
    (
        "env on an init container named like a reserved one is not covered",
        [
            patch(
                jobs=[
                    job_patch(
                        "node", {"initContainers": [{"name": "setup", "env": [{"name": "A"}]}]}
                    )
                ]
            )
        ],
        [],
    ),
    (
        "unknown replicated job",
        [patch(jobs=[job_patch("node"), job_patch("launcher", {"containers": [{"name": "x"}]})])],
        [(f"{JOBS}[1].name", INVALID, patches.MSG_UNKNOWN_JOB)],
    ),
    (
        "unknown container",
        [patch(jobs=[job_patch("node", {"containers": [{"name": "node"}, {"name": "ghost"}]})])],
        [
            (
                f"{JOBS}[0].template.spec.template.spec.containers[1].name",
                INVALID,
                "must not have container that doesn't exist in the runtime job node",
            )
        ],
    ),
    (
        "an init container named in containers",
        [patch(jobs=[job_patch("node", {"containers": [{"name": "setup"}]})])],
        [
            (
                f"{JOBS}[0].template.spec.template.spec.containers[0].name",
                INVALID,
                "must not have container that doesn't exist in the runtime job node",
            )
        ],
    ),
    (
        "unknown init container",
        [
            patch(
                jobs=[job_patch("node", {"initContainers": [{"name": "setup"}, {"name": "ghost"}]})]
            )
        ],
        [
            (
                f"{JOBS}[0].template.spec.template.spec.initContainers[1].name",
                INVALID,
                "must not have initContainer that doesn't exist in the runtime job node",
            )
        ],
    ),
    (
        "env on node",
        [
            patch(
                jobs=[
                    job_patch(
                        "node",
                        {"containers": [{"name": "node", "env": [{"name": "A", "value": "1"}]}]},
                    )
                ]
            )
        ],
        [(f"{JOBS}[0].template.spec.template.spec.containers[0].env", INVALID, patches.MSG_NO_ENV)],
    ),
    (
        "env on dataset-initializer",
        [
            patch(
                jobs=[
                    job_patch(
                        "dataset-initializer",
                        {"containers": [{"name": "dataset-initializer", "env": [{"name": "A"}]}]},
                    )
                ]
            )
        ],
        [(f"{JOBS}[0].template.spec.template.spec.containers[0].env", INVALID, patches.MSG_NO_ENV)],
    ),
    (
        "all errors are collected",
        [
            patch(
                "bad",
                jobs=[
                    job_patch("ghost", {"containers": [{"name": "ghost"}]}),
                    job_patch("node", {"containers": [{"name": "node", "env": [{"name": "A"}]}]}),
                ],
            )
        ],
        [
            (f"{P0}.manager", INVALID, NOT_DOMAIN_PREFIXED),
            (f"{JOBS}[0].name", INVALID, patches.MSG_UNKNOWN_JOB),
            (
                f"{JOBS}[1].template.spec.template.spec.containers[0].env",
                INVALID,
                patches.MSG_NO_ENV,
            ),
        ],
    ),
]


@pytest.mark.parametrize(
    ("runtime_patches", "expected"),
    [pytest.param(p, e, id=name) for name, p, e in CONTENT_CASES],
)
def test_patch_content(
    runtime_patches: list[dict[str, Any]], expected: list[tuple[str, str, str]]
) -> None:
    errors = patches.validate_patch_content(trainjob(runtime_patches=runtime_patches), RUNTIME)
    assert brief(errors) == expected


def test_patch_content_error_values_name_the_offender() -> None:
    tj = trainjob(
        runtime_patches=[
            patch(jobs=[job_patch("ghost"), job_patch("node", {"containers": [{"name": "x"}]})])
        ]
    )
    errors = patches.validate_patch_content(tj, RUNTIME)
    assert [e.value for e in errors] == ["ghost", "x"]
    assert str(errors[0]) == (f'{JOBS}[0].name: Invalid value: "ghost": {patches.MSG_UNKNOWN_JOB}')


def test_no_patches_no_errors() -> None:
    assert patches.validate_patch_content(trainjob(), RUNTIME) == []


# --- change detection ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("old", "new", "changed"),
    [
        (None, None, False),
        (None, [], False),
        ([patch(time="2026-01-01T00:00:00Z")], [patch(time="2026-02-02T00:00:00Z")], False),
        ([patch()], [patch(time="2026-02-02T00:00:00Z")], False),
        ([patch()], [patch(jobs=[job_patch("node", {"nodeSelector": {"a": "b"}})])], True),
        ([patch()], [], True),
        ([patch("a.io/x"), patch("b.io/y")], [patch("b.io/y"), patch("a.io/x")], True),
    ],
)
def test_patches_changed(
    old: list[dict[str, Any]] | None, new: list[dict[str, Any]] | None, changed: bool
) -> None:
    assert (
        patches.patches_changed(trainjob(runtime_patches=new), trainjob(runtime_patches=old))
        is changed
    )


# --- mutability on update ------------------------------------------------------------------------
SELECTOR_A = [patch(jobs=[job_patch("node", {"nodeSelector": {"pool": "a"}})])]
SELECTOR_B = [patch(jobs=[job_patch("node", {"nodeSelector": {"pool": "b"}})])]


ACTIVE_MSG = "RuntimePatches cannot be modified when the JobSet's ReplicatedJob {} is still active"


def tj(runtime_patches: list[dict[str, Any]] | None, suspend: bool) -> TrainJob:
    return trainjob(runtime_patches=runtime_patches, suspend=suspend)


def jobset(active: dict[str, int]) -> JobSet:
    return b.jobset_model(namespace=None, active=active)


TIMED_A = [{**SELECTOR_A[0], "time": "2030-01-01T00:00:00Z"}]
SUSPEND_RULE = [("spec.runtimePatches", FORBIDDEN, patches.MSG_SUSPEND_REQUIRED)]


@pytest.mark.parametrize(
    ("old", "new", "js", "expected"),
    [
        pytest.param(tj(SELECTOR_A, False), tj(SELECTOR_A, False), None, [], id="unchanged"),
        pytest.param(tj(SELECTOR_A, True), tj(SELECTOR_A, False), None, [], id="only-suspend"),
        pytest.param(
            tj(SELECTOR_A, False), tj(TIMED_A, False), jobset({"node": 3}), [], id="only-time"
        ),
        pytest.param(
            tj(SELECTOR_A, False), tj(SELECTOR_B, False), None, SUSPEND_RULE, id="changed-running"
        ),
        pytest.param(
            tj(SELECTOR_A, True), tj(SELECTOR_B, True), None, [], id="changed-while-suspended"
        ),
        pytest.param(
            tj(None, True), tj(SELECTOR_B, False), jobset({"node": 0}), [], id="patch-and-unsuspend"
        ),
        pytest.param(
            tj(SELECTOR_B, False), tj(None, True), jobset({"node": 0}), [], id="restore-and-suspend"
        ),
        pytest.param(
            tj(SELECTOR_B, False),
            tj(None, True),
            jobset({"node": 0, "dataset-initializer": 1, "launcher": 2}),
            [("spec.runtimePatches", FORBIDDEN, ACTIVE_MSG.format("dataset-initializer"))],
            id="suspend-while-jobs-active",
        ),
        pytest.param(
            tj(SELECTOR_A, True),
            tj(SELECTOR_B, True),
            jobset({"node": 2}),
            [("spec.runtimePatches", FORBIDDEN, ACTIVE_MSG.format("node"))],
            id="suspended-but-jobset-active",
        ),
        pytest.param(
            tj(SELECTOR_A, False),
            tj(SELECTOR_B, False),
            jobset({"node": 2}),
            SUSPEND_RULE,
            id="running-reports-suspend-rule-only",
        ),
    ],
)
def test_patch_update(
    old: TrainJob, new: TrainJob, js: JobSet | None, expected: list[tuple[str, str, str]]
) -> None:
    assert brief(patches.validate_patch_update(new, old, js)) == expected


def test_first_active_job_follows_status_order() -> None:
    assert patches.first_active_job(None) is None
    assert patches.first_active_job(jobset({"node": 0})) is None
    assert patches.first_active_job(jobset({"z": 1, "a": 1})) == "z"
