"""The TrainJob validator (trainer.admission.trainjob.validate_trainjob): runtimeRef, runtime
existence, deprecation warning, initializer and data-cache rules, runtimePatches content and
mutability, composition with the plugin rules, and the generated-name budget."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests import builders as b
from trainer.admission import patches, trainjob
from trainer.admission.trainjob import validate_trainjob
from trainer.admission.types import ClusterView, Verdict
from trainer.api import constants as c
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainJob
from trainer.jobset.types import JobSet
from trainer.machinery.errors import FORBIDDEN, INVALID, FieldError, Rendered
from trainer.runtime.assemble import PatchMergeError
from trainer.runtime.framework import Framework
from trainer.runtime.info import BuildError, Info, Runtime

REF = "spec.runtimeRef"
NAME = "metadata.name"


# --- builders ------------------------------------------------------------------------------------
def ctr(name: str, *mounts: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": f"{name}-image"}
    if mounts:
        out["volumeMounts"] = [{"name": m, "mountPath": f"/workspace/{m}"} for m in mounts]
    return out


NODE_JOB = b.replicated_job("node", ancestor=c.ANCESTOR_TRAINER, containers=[ctr("node")])
DATASET_JOB = b.replicated_job(
    "dataset-initializer",
    ancestor=c.ANCESTOR_DATASET_INITIALIZER,
    containers=[ctr("dataset-initializer", "initializer")],
)
MODEL_JOB = b.replicated_job(
    "model-initializer",
    ancestor=c.ANCESTOR_MODEL_INITIALIZER,
    containers=[ctr("model-initializer", "initializer")],
)
CACHE_JOB = b.replicated_job(
    "cache-initializer",
    ancestor=c.ANCESTOR_CACHE_INITIALIZER,
    containers=[ctr("cache-initializer")],
)


def runtime(
    jobs: list[dict[str, Any]] | None = None,
    *,
    kind: str = c.KIND_CLUSTER_TRAINING_RUNTIME,
    name: str = "torch",
    labels: dict[str, str] | None = None,
    ml_policy: dict[str, Any] | None = None,
) -> Runtime:
    """The runtime ``name`` (in ``ns`` when namespaced): a torch policy over ``jobs``."""
    return b.runtime_model(
        name,
        kind=kind,
        namespace="ns",
        labels=labels or None,
        ml_policy=ml_policy if ml_policy is not None else {"numNodes": 1, "torch": {}},
        replicated_jobs=jobs if jobs is not None else [NODE_JOB],
    )


def job(spec_yaml: str = "", *, name: str = "job", **spec: Any) -> TrainJob:
    """A TrainJob ``name`` in namespace ``ns`` on ClusterTrainingRuntime ``torch`` unless the
    YAML says otherwise."""
    fields = {**(yaml.safe_load(spec_yaml) or {}), **spec}
    return b.trainjob_model(name, namespace="ns", runtime="torch", **fields)


def brief(verdict: Verdict) -> list[tuple[str, str, str]]:
    return [(e.path, e.type, e.message) for e in verdict.errors]


def check(tj: TrainJob, rt: Runtime | None, old: TrainJob | None = None, **view: Any) -> Verdict:
    return validate_trainjob(tj, old, ClusterView(runtime=rt, **view))


# --- runtimeRef and the runtime ------------------------------------------------------------------
def test_valid_trainjob_is_accepted() -> None:
    verdict = check(job("trainer: {numNodes: 2, command: [torchrun, train.py]}"), runtime())
    assert verdict.allowed
    assert verdict.warnings == []


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ({"name": "x", "kind": "Foo"}, "unsupported runtime: Foo.trainer.kubeflow.org"),
        (
            {"name": "x", "kind": "TrainingRuntime", "apiGroup": "example.com"},
            "unsupported runtime: TrainingRuntime.example.com",
        ),
    ],
)
def test_unsupported_runtime_stops(ref: dict[str, str], message: str) -> None:
    # Even with a bad patch present, the runtimeRef error is the only one.
    tj = job(runtimeRef=ref, runtimePatches=[{"manager": "bad"}])
    verdict = check(tj, runtime())
    # Upstream's webhook answers with the message alone, no field path.
    assert [str(e) for e in verdict.errors] == [message]


@pytest.mark.parametrize(
    ("kind", "runtime_error", "message"),
    [
        (
            c.KIND_TRAINING_RUNTIME,
            None,
            'TrainingRuntime.trainer.kubeflow.org "torch" not found: specified trainingRuntime '
            "must be created before the TrainJob is created",
        ),
        (
            c.KIND_CLUSTER_TRAINING_RUNTIME,
            None,
            'ClusterTrainingRuntime.trainer.kubeflow.org "torch" not found: specified '
            "clusterTrainingRuntime must be created before the TrainJob is created",
        ),
        (
            c.KIND_TRAINING_RUNTIME,
            "TrainingRuntime specified in TrainJob is not found: boom",
            "TrainingRuntime specified in TrainJob is not found: boom: specified trainingRuntime "
            "must be created before the TrainJob is created",
        ),
    ],
)
def test_missing_runtime_stops(kind: str, runtime_error: str | None, message: str) -> None:
    tj = job(runtimeRef={"name": "torch", "kind": kind}, runtimePatches=[{"manager": "bad"}])
    verdict = check(tj, None, runtime_error=runtime_error)
    assert brief(verdict) == [(REF, INVALID, message)]


DEPRECATED = {c.LABEL_SUPPORT: c.SUPPORT_DEPRECATED}


@pytest.mark.parametrize(
    ("kind", "labels", "warned"),
    [
        (c.KIND_CLUSTER_TRAINING_RUNTIME, DEPRECATED, True),
        (c.KIND_CLUSTER_TRAINING_RUNTIME, {c.LABEL_SUPPORT: "supported"}, False),
        (c.KIND_CLUSTER_TRAINING_RUNTIME, None, False),
        (c.KIND_TRAINING_RUNTIME, DEPRECATED, False),
    ],
)
def test_deprecated_runtime_warning(kind: str, labels: dict[str, str] | None, warned: bool) -> None:
    tj = job(runtimeRef={"name": "torch", "kind": kind})
    verdict = check(tj, runtime(kind=kind, labels=labels))
    assert verdict.allowed
    expected = [
        'Referenced ClusterTrainingRuntime "torch" is deprecated and will be removed in a future '
        "release of Kubeflow Trainer. See runtime deprecation policy: "
        "https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html"
        "#runtime-deprecation-policy"
    ]
    assert verdict.warnings == (expected if warned else [])


def test_runtime_without_spec_is_reported_once() -> None:
    rt = ClusterTrainingRuntime.from_wire({"metadata": {"name": "torch"}})
    verdict = check(job(), rt)
    assert brief(verdict) == [(REF, INVALID, "runtime ClusterTrainingRuntime/torch has no spec")]


# --- initializers --------------------------------------------------------------------------------
DATASET = "initializer: {dataset: {storageUri: 'hf://tatsu-lab/alpaca'}}"
MODEL = "initializer: {model: {storageUri: 'hf://meta-llama/Llama-3.2-1B-Instruct'}}"
BOTH = (
    "initializer: {dataset: {storageUri: 'hf://tatsu-lab/alpaca'}, "
    "model: {storageUri: 'hf://meta-llama/x'}}"
)
NO_DATASET_JOB = (
    "must have dataset-initializer job when trainJob is configured with input datasetConfig"
)
NO_MODEL_JOB = "must have model-initializer job when trainJob is configured with input modelConfig"
NO_DATASET_CTR = (
    "must have container with name - dataset-initializer in the dataset-initializer job"
)
NO_MODEL_CTR = "must have container with name - model-initializer in the model-initializer job"
NO_DATASET_MOUNT = (
    "must have volumeMount with name - initializer in container dataset-initializer of the "
    "dataset-initializer job"
)
NO_MODEL_MOUNT = (
    "must have volumeMount with name - initializer in container model-initializer of the "
    "model-initializer job"
)

INITIALIZER_CASES: list[tuple[str, str, list[dict[str, Any]], list[str]]] = [
    ("no initializer, no jobs", "", [NODE_JOB], []),
    ("dataset ok", DATASET, [DATASET_JOB, NODE_JOB], []),
    ("model ok", MODEL, [MODEL_JOB, NODE_JOB], []),
    ("both ok", BOTH, [DATASET_JOB, MODEL_JOB, NODE_JOB], []),
    ("dataset without job", DATASET, [NODE_JOB], [NO_DATASET_JOB]),
    ("model without job", MODEL, [DATASET_JOB, NODE_JOB], [NO_MODEL_JOB]),
    ("both without jobs", BOTH, [NODE_JOB], [NO_DATASET_JOB, NO_MODEL_JOB]),
    (
        "dataset job without its container",
        DATASET,
        [
            b.replicated_job(
                "dataset-initializer",
                ancestor=c.ANCESTOR_DATASET_INITIALIZER,
                containers=[ctr("other", "initializer")],
            ),
            NODE_JOB,
        ],
        [NO_DATASET_CTR],
    ),
    (
        "model job without its container",
        MODEL,
        [
            b.replicated_job(
                "model-initializer",
                ancestor=c.ANCESTOR_MODEL_INITIALIZER,
                containers=[ctr("other")],
            ),
            NODE_JOB,
        ],
        [NO_MODEL_CTR],
    ),
    (
        "dataset container without the initializer mount",
        DATASET,
        [
            b.replicated_job(
                "dataset-initializer",
                ancestor=c.ANCESTOR_DATASET_INITIALIZER,
                containers=[ctr("dataset-initializer", "data")],
            ),
            NODE_JOB,
        ],
        [NO_DATASET_MOUNT],
    ),
    (
        "model container without the initializer mount",
        MODEL,
        [
            b.replicated_job(
                "model-initializer",
                ancestor=c.ANCESTOR_MODEL_INITIALIZER,
                containers=[ctr("model-initializer")],
            ),
            NODE_JOB,
        ],
        [NO_MODEL_MOUNT],
    ),
    (
        "the job is found by name, not ancestor (as upstream)",
        DATASET,
        [
            b.replicated_job(
                "prepare",
                ancestor=c.ANCESTOR_DATASET_INITIALIZER,
                containers=[ctr("dataset-initializer", "initializer")],
            ),
            NODE_JOB,
        ],
        [NO_DATASET_JOB],
    ),
    (
        "an init container of that name counts (as upstream)",
        DATASET,
        [
            b.replicated_job(
                "dataset-initializer",
                ancestor=c.ANCESTOR_DATASET_INITIALIZER,
                containers=[ctr("sidecar")],
                init_containers=[ctr("dataset-initializer", "initializer")],
            ),
            NODE_JOB,
        ],
        [],
    ),
]


@pytest.mark.parametrize(
    ("spec", "jobs", "messages"),
    [pytest.param(s, j, m, id=n) for n, s, j, m in INITIALIZER_CASES],
)
def test_initializer_rules(spec: str, jobs: list[dict[str, Any]], messages: list[str]) -> None:
    verdict = check(job(spec), runtime(jobs))
    assert brief(verdict) == [(REF, INVALID, m) for m in messages]


def test_initializer_mount_added_by_a_patch_counts() -> None:
    bare = b.replicated_job(
        "dataset-initializer",
        ancestor=c.ANCESTOR_DATASET_INITIALIZER,
        containers=[ctr("dataset-initializer")],
    )
    mount = {"name": "initializer", "mountPath": "/workspace"}
    tj = job(
        DATASET,
        runtimePatches=[
            {
                "manager": "acme.io/platform",
                "trainingRuntimeSpec": {
                    "template": {
                        "spec": {
                            "replicatedJobs": [
                                {
                                    "name": "dataset-initializer",
                                    "template": {
                                        "spec": {
                                            "template": {
                                                "spec": {
                                                    "containers": [
                                                        {
                                                            "name": "dataset-initializer",
                                                            "volumeMounts": [mount],
                                                        }
                                                    ]
                                                }
                                            }
                                        }
                                    },
                                }
                            ]
                        }
                    }
                },
            }
        ],
    )
    assert check(tj, runtime([bare, NODE_JOB])).allowed


def test_initializer_error_value_is_the_runtime_ref() -> None:
    verdict = check(job(DATASET), runtime([NODE_JOB]))
    # As upstream's webhook prints the struct (docs/side-by-side.md).
    assert verdict.errors[0].value == Rendered('{"name":"torch"}')


# --- this project's data cache -------------------------------------------------------------------
CACHE_URI = "initializer: {dataset: {storageUri: 'cache://sales/transactions'}}"
CACHE_JOB_MISSING = (
    "must have cache-initializer job when trainJob is configured with a cache:// input "
    "datasetConfig"
)
CACHE_CTR_MISSING = "must have container with name - cache-initializer in the cache-initializer job"
CACHE_REPLICAS = (
    "must have replicas 1 in the cache-initializer job when trainJob is configured with a "
    "cache:// input datasetConfig, got 2"
)

CACHE_CASES: list[tuple[str, str, list[dict[str, Any]], list[str]]] = [
    ("cache ok (no dataset-initializer needed)", CACHE_URI, [CACHE_JOB, NODE_JOB], []),
    (
        "cache job with a cache of three pods",
        CACHE_URI,
        [
            b.replicated_job(
                "cache-initializer",
                ancestor=c.ANCESTOR_CACHE_INITIALIZER,
                containers=[ctr("cache-initializer")],
                parallelism=3,
            ),
            NODE_JOB,
        ],
        [],
    ),
    (
        "cache job without its container",
        CACHE_URI,
        [
            b.replicated_job(
                "cache-initializer",
                ancestor=c.ANCESTOR_CACHE_INITIALIZER,
                containers=[ctr("flight")],
            ),
            NODE_JOB,
        ],
        [CACHE_CTR_MISSING],
    ),
    (
        "cache container only as an init container",
        CACHE_URI,
        [
            b.replicated_job(
                "cache-initializer",
                ancestor=c.ANCESTOR_CACHE_INITIALIZER,
                containers=[ctr("flight")],
                init_containers=[ctr("cache-initializer")],
            ),
            NODE_JOB,
        ],
        [CACHE_CTR_MISSING],
    ),
    (
        "cache job with two replicas",
        CACHE_URI,
        [
            b.replicated_job(
                "cache-initializer",
                ancestor=c.ANCESTOR_CACHE_INITIALIZER,
                containers=[ctr("cache-initializer")],
                replicas=2,
            ),
            NODE_JOB,
        ],
        [CACHE_REPLICAS],
    ),
    (
        "cache ancestor on a job with another name",
        CACHE_URI,
        [
            b.replicated_job(
                "cache",
                ancestor=c.ANCESTOR_CACHE_INITIALIZER,
                containers=[ctr("cache-initializer")],
            ),
            NODE_JOB,
        ],
        [CACHE_JOB_MISSING],
    ),
    (
        "cache:// on a runtime without a cache step: upstream's dataset checks",
        CACHE_URI,
        [NODE_JOB],
        [NO_DATASET_JOB],
    ),
    (
        "another scheme on a cache runtime: upstream's dataset checks",
        DATASET,
        [CACHE_JOB, NODE_JOB],
        [NO_DATASET_JOB],
    ),
]


@pytest.mark.parametrize(
    ("spec", "jobs", "messages"),
    [pytest.param(s, j, m, id=n) for n, s, j, m in CACHE_CASES],
)
def test_cache_rules(spec: str, jobs: list[dict[str, Any]], messages: list[str]) -> None:
    verdict = check(job(spec), runtime(jobs))
    assert brief(verdict) == [(REF, INVALID, m) for m in messages]


def test_shipped_cache_runtime_accepts_a_cache_dataset() -> None:
    with open("trainer/data/runtimes/torch-distributed-with-cache.yaml") as f:
        rt = ClusterTrainingRuntime.from_wire(yaml.safe_load(f))
    tj = job(
        CACHE_URI + "\ntrainer: {numNodes: 2}",
        runtimeRef={"name": "torch-distributed-with-cache"},
    )
    assert brief(check(tj, rt)) == []


# --- runtimePatches ------------------------------------------------------------------------------
KUEUE_EMPTY_PATCH = {
    "manager": c.KUEUE_PATCH_MANAGER,
    "trainingRuntimeSpec": {"template": {"spec": {}}},
}


def node_patch(manager: str = "acme.io/platform", **pod: Any) -> dict[str, Any]:
    return {
        "manager": manager,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": "node", "template": {"spec": {"template": {"spec": pod}}}}
                    ]
                }
            }
        },
    }


def test_kueue_empty_patch_is_accepted_on_create() -> None:
    verdict = check(job(suspend=True, runtimePatches=[KUEUE_EMPTY_PATCH]), runtime())
    assert verdict.allowed, verdict.errors


def test_patch_rules_report_precise_paths() -> None:
    bad_job = {
        "manager": "acme.io/platform",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": "node"},
                        {"name": "launcher"},
                    ]
                }
            }
        },
    }
    tj = job(
        runtimePatches=[
            bad_job,
            node_patch(
                "kueue.k8s.io/", containers=[{"name": "node", "env": [{"name": "A", "value": "1"}]}]
            ),
            node_patch(
                "acme.io/other", containers=[{"name": "ghost"}], initContainers=[{"name": "ghost"}]
            ),
        ]
    )
    pod = "trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec"
    assert brief(check(tj, runtime())) == [
        (
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[1].name",
            INVALID,
            "must not have replicated job that doesn't exist in the runtime job template",
        ),
        (
            "spec.runtimePatches[1].manager",
            INVALID,
            'must be a domain-prefixed path (such as "acme.io/foo")',
        ),
        (
            f"spec.runtimePatches[1].{pod}.containers[0].env",
            INVALID,
            "must not have envs for the dataset-initializer, model-initializer, node containers",
        ),
        (
            f"spec.runtimePatches[2].{pod}.containers[0].name",
            INVALID,
            "must not have container that doesn't exist in the runtime job node",
        ),
        (
            f"spec.runtimePatches[2].{pod}.initContainers[0].name",
            INVALID,
            "must not have initContainer that doesn't exist in the runtime job node",
        ),
    ]


def test_patch_adding_a_job_with_a_template_is_rejected_once() -> None:
    extra = b.replicated_job("extra", ancestor=None, containers=[ctr("extra")])
    tj = job(
        runtimePatches=[
            {
                "manager": "acme.io/platform",
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [extra]}}},
            }
        ]
    )
    assert brief(check(tj, runtime())) == [
        (
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].name",
            INVALID,
            "must not have replicated job that doesn't exist in the runtime job template",
        )
    ]


def test_unmergeable_patches_without_a_patch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(new: TrainJob, rt: Runtime) -> Info:
        raise PatchMergeError(
            "the runtimePatches do not merge into a valid JobSet spec of the runtime: "
            "spec.replicatedJobs[0].template: Required value"
        )

    monkeypatch.setattr(trainjob, "new_info", broken)
    verdict = check(job(), runtime())
    assert brief(verdict) == [
        (
            "spec.runtimePatches",
            INVALID,
            "the runtimePatches do not merge into a valid JobSet spec of the runtime: "
            "spec.replicatedJobs[0].template: Required value",
        )
    ]


def test_valid_patch_is_accepted() -> None:
    tj = job(runtimePatches=[node_patch(nodeSelector={"pool": "gpu"}, serviceAccountName="sa")])
    assert check(tj, runtime()).allowed


# --- update: runtimePatches mutability -----------------------------------------------------------
def jobset(active: int) -> JobSet:
    return b.jobset_model(namespace="ns", suspend=active == 0, active={"node": active})


PATCHED = [KUEUE_EMPTY_PATCH | {"time": "2026-01-01T00:00:00Z"}]
KUEUE_SELECTOR = [
    node_patch(c.KUEUE_PATCH_MANAGER, nodeSelector={"flavor": "a"})
    | {"time": "2026-02-01T00:00:00Z"}
]


@pytest.mark.parametrize(
    ("old", "new", "js", "expected"),
    [
        pytest.param(
            job(suspend=True, runtimePatches=PATCHED),
            job(suspend=False, runtimePatches=PATCHED),
            jobset(0),
            [],
            id="only-suspend-flips",
        ),
        pytest.param(
            job(suspend=True, runtimePatches=PATCHED),
            job(suspend=False, runtimePatches=KUEUE_SELECTOR),
            jobset(0),
            [],
            id="patch-and-unsuspend",
        ),
        pytest.param(
            job(suspend=True, runtimePatches=PATCHED),
            job(suspend=False, runtimePatches=KUEUE_SELECTOR),
            None,
            [],
            id="patch-and-unsuspend-before-jobset-exists",
        ),
        pytest.param(
            job(suspend=False, runtimePatches=KUEUE_SELECTOR),
            job(suspend=False, runtimePatches=PATCHED),
            jobset(2),
            [("spec.runtimePatches", FORBIDDEN, patches.MSG_SUSPEND_REQUIRED)],
            id="change-while-running",
        ),
        pytest.param(
            job(suspend=False, runtimePatches=KUEUE_SELECTOR),
            job(suspend=True, runtimePatches=PATCHED),
            jobset(2),
            [
                (
                    "spec.runtimePatches",
                    FORBIDDEN,
                    "RuntimePatches cannot be modified when the JobSet's ReplicatedJob node is "
                    "still active",
                )
            ],
            id="restore-and-suspend-while-pods-run",
        ),
        pytest.param(
            job(suspend=False, runtimePatches=KUEUE_SELECTOR),
            job(suspend=True, runtimePatches=PATCHED),
            jobset(0),
            [],
            id="restore-and-suspend-after-pods-stopped",
        ),
    ],
)
def test_update_mutability(
    old: TrainJob, new: TrainJob, js: JobSet | None, expected: list[tuple[str, str, str]]
) -> None:
    assert brief(check(new, runtime(), old, jobset=js)) == expected


# --- composition with the plugin rules -----------------------------------------------------------
def test_plugin_rules_are_included() -> None:
    tj = job("trainer: {env: [{name: PET_NNODES, value: '3'}]}")
    verdict = check(tj, runtime())
    assert brief(verdict) == [
        (
            "spec.trainer.env",
            INVALID,
            "must not have reserved envs, invalid envs configured: [PET_NNODES]",
        )
    ]


class Unbuildable:
    """A plugin whose Validate phase finds the runtime cannot be built."""

    name = "Unbuildable"

    def validate(self, info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
        raise BuildError("the runtime cannot be built")


def test_plugin_build_error_is_reported_at_runtime_ref() -> None:
    verdict = validate_trainjob(
        job(), None, ClusterView(runtime=runtime()), framework=Framework([Unbuildable()])
    )
    assert brief(verdict) == [(REF, INVALID, "the runtime cannot be built")]


def test_build_error_is_not_reported_twice() -> None:
    # The missing envInjection target is both a plugin rule and a render failure.
    rt = runtime(
        ml_policy={
            "torch": {
                "envInjection": {"targets": [{"jobName": "node", "containerNames": ["ghost"]}]}
            }
        }
    )
    verdict = check(job("trainer: {numNodes: 2}"), rt)
    assert brief(verdict) == [
        (
            REF,
            INVALID,
            'envInjection target podSet "node" container "ghost" not found in runtime template',
        )
    ]


# --- beyond upstream: the generated-name budget --------------------------------------------------
INIT_JOBS = [DATASET_JOB, NODE_JOB]


def pod_name_error(pod: str, job: str, limit: int) -> str:
    return (
        f'the JobSet would generate the Pod name "{pod}" for replicated job "{job}", '
        f'{len(pod)} characters long ("abcde" stands for the random suffix the Job controller '
        f"adds), but JobSet allows at most 63; the longest TrainJob name this runtime allows "
        f"with these settings is {limit} characters"
    )


def test_name_budget_with_a_dataset_initializer() -> None:
    name = "a" * 34
    verdict = check(job(name=name), runtime(INIT_JOBS))
    pod = f"{name}-dataset-initializer-0-0-abcde"
    assert brief(verdict) == [(NAME, INVALID, pod_name_error(pod, "dataset-initializer", 33))]
    assert "33" in verdict.errors[0].message
    assert verdict.errors[0].value == name
    assert check(job(name="a" * 33), runtime(INIT_JOBS)).allowed


@pytest.mark.parametrize(
    ("num_nodes", "limit"),
    [(10, 48), (11, 47), (1, 48)],
)
def test_name_budget_plain_torch(num_nodes: int, limit: int) -> None:
    spec = f"trainer: {{numNodes: {num_nodes}}}"
    assert check(job(spec, name="a" * limit), runtime()).allowed
    name = "a" * (limit + 1)
    verdict = check(job(spec, name=name), runtime())
    pod = f"{name}-node-0-{num_nodes - 1}-abcde"
    assert brief(verdict) == [(NAME, INVALID, pod_name_error(pod, "node", limit))]


def test_name_budget_reports_the_longest_name_once() -> None:
    name = "a" * 42  # job 42+22=64, hostname 66, pod 72
    verdict = check(job(name=name), runtime(INIT_JOBS))
    assert [e.path for e in verdict.errors] == [NAME]
    message = verdict.errors[0].message
    assert message.startswith("the JobSet would generate the Pod name ")
    assert "(2 other generated names are too long as well)" in message
    assert message.endswith("is 33 characters")


def test_name_budget_counts_the_volume_flux_names_after_the_trainjob() -> None:
    """Flux's ConfigMap volume ``<name>-flux-entrypoint`` (upstream's name) must be a DNS-1123
    label: 48 characters make it 64, which the Job API refuses, though every pod name fits."""
    rt = runtime([NODE_JOB], ml_policy={"numNodes": 1, "flux": {"numProcPerNode": 1}})
    assert check(job("trainer: {numNodes: 2}", name="a" * 47), rt).allowed
    verdict = check(job("trainer: {numNodes: 2}", name="a" * 48), rt)
    assert [e.path for e in verdict.errors] == [NAME]
    message = verdict.errors[0].message
    assert message.startswith(
        f'the JobSet would generate the pod volume name "{"a" * 48}-flux-entrypoint" for '
        'replicated job "node", 64 characters long'
    )
    assert message.endswith("is 47 characters")


def test_name_budget_is_not_checked_on_update() -> None:
    name = "a" * 34
    old = job(name=name, suspend=True)
    new = job(name=name, suspend=False)
    assert check(new, runtime(INIT_JOBS), old, jobset=jobset(0)).allowed


def test_name_budget_with_mpi_uses_a_dummy_key() -> None:
    jobs = [
        b.replicated_job("launcher", ancestor=c.ANCESTOR_TRAINER, containers=[ctr("node")]),
        b.replicated_job("node", ancestor=None, containers=[ctr("node")]),
    ]
    rt = runtime(jobs, ml_policy={"numNodes": 1, "mpi": {"numProcPerNode": 1}})
    assert check(job("trainer: {numNodes: 2}", name="a" * 44), rt).allowed
    verdict = check(job("trainer: {numNodes: 2}", name="a" * 45), rt)
    assert [e.path for e in verdict.errors] == [NAME]
    assert verdict.errors[0].message.endswith("is 44 characters")


def test_errors_render_like_kubernetes() -> None:
    verdict = check(job(DATASET), runtime([NODE_JOB]))
    error: FieldError = verdict.errors[0]
    assert str(error) == f'spec.runtimeRef: Invalid value: {{"name":"torch"}}: {NO_DATASET_JOB}'
