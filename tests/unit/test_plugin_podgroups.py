"""The gang-scheduling plugins (CoScheduling, Volcano) and their shared PodGroup arithmetic:
what a user sees in the rendered PodGroup and JobSet, and the Volcano admission helpers."""

from __future__ import annotations

from typing import Any

import pytest

from tests import builders as b
from trainer.api import constants as c
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainJob
from trainer.machinery.errors import INVALID, FieldError
from trainer.plugins import volcano
from trainer.plugins.coscheduling import CoschedulingPlugin
from trainer.plugins.jobset import JobSetPlugin
from trainer.plugins.registry import render
from trainer.plugins.volcano import VolcanoPlugin
from trainer.runtime import podgroup
from trainer.runtime.assemble import new_info
from trainer.runtime.framework import Framework
from trainer.runtime.info import Info, Observed

OWNER = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "name": "job",
    "uid": "uid-1",
    "controller": True,
    "blockOwnerDeletion": True,
}
META = {
    "name": "job",
    "namespace": "ns",
    "labels": {"trainer.kubeflow.org/trainjob-name": "job"},
    "ownerReferences": [OWNER],
}


def _job(name: str, ancestor: str | None, pod: dict[str, Any], **extra: Any) -> dict[str, Any]:
    tmpl: dict[str, Any] = {"spec": {"template": {"spec": pod}}}
    if ancestor is not None:
        tmpl["metadata"] = {"labels": {c.LABEL_ANCESTOR: ancestor}}
    return {"name": name, "template": tmpl, **extra}


def _ctr(name: str, requests: dict[str, Any] | None = None) -> dict[str, Any]:
    ctr: dict[str, Any] = {"name": name, "image": "img"}
    if requests is not None:
        ctr["resources"] = {"requests": requests}
    return ctr


ONE_CPU = {"cpu": "1", "memory": "4Gi"}


def standard_jobs(requests: dict[str, Any] | None = ONE_CPU) -> list[dict[str, Any]]:
    """Dataset and model initializers and a trainer step, each pod requesting ``requests``."""
    return [
        _job(
            "dataset-initializer",
            c.ANCESTOR_DATASET_INITIALIZER,
            {"containers": [_ctr("dataset-initializer", requests)]},
        ),
        _job(
            "model-initializer",
            c.ANCESTOR_MODEL_INITIALIZER,
            {"containers": [_ctr("model-initializer", requests)]},
        ),
        _job("node", c.ANCESTOR_TRAINER, {"containers": [_ctr("node", requests)]}),
    ]


def make_runtime(
    pod_group_policy: dict[str, Any] | None,
    jobs: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> ClusterTrainingRuntime:
    return b.cluster_runtime_model(
        "rt",
        replicated_jobs=jobs if jobs is not None else standard_jobs(),
        template_annotations=annotations,
        pod_group_policy=pod_group_policy,
    )


def make_trainjob(num_nodes: int = 100, suspend: bool = False) -> TrainJob:
    return b.trainjob_model(
        namespace="ns", uid="uid-1", runtime="rt", suspend=suspend, num_nodes=num_nodes
    )


def framework(*plugins: Any) -> Framework:
    return Framework([*plugins, JobSetPlugin()])


def rendered(
    trainjob: TrainJob,
    runtime: ClusterTrainingRuntime,
    *plugins: Any,
    observed: Observed | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Rendered objects grouped by kind."""
    out: dict[str, list[dict[str, Any]]] = {}
    for obj in render(trainjob, runtime, observed=observed, framework=framework(*plugins)):
        out.setdefault(obj["kind"], []).append(obj)
    return out


def info_after_policies(trainjob: TrainJob, runtime: ClusterTrainingRuntime) -> Info:
    """The Info with the pod counts the Build phase sees (``trainer.numNodes`` is applied when
    the Info is assembled)."""
    return new_info(trainjob, runtime)


COSCHED = {"coscheduling": {"scheduleTimeoutSeconds": 100}}
VOLCANO: dict[str, Any] = {"volcano": {}}


# --- 100 nodes and 2 initializers in one gang ----------------------------------------------------


def test_coscheduling_100_nodes_and_2_initializers() -> None:
    objs = rendered(make_trainjob(), make_runtime(COSCHED), CoschedulingPlugin())
    assert objs["PodGroup"] == [
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": META,
            "spec": {
                "minMember": 102,
                "minResources": {"cpu": "102", "memory": "408Gi"},
                "scheduleTimeoutSeconds": 100,
            },
        }
    ]


def test_volcano_100_nodes_and_2_initializers() -> None:
    objs = rendered(make_trainjob(), make_runtime(VOLCANO), VolcanoPlugin())
    assert objs["PodGroup"] == [
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": META,
            "spec": {"minMember": 102, "minResources": {"cpu": "102", "memory": "408Gi"}},
        }
    ]


def test_coscheduling_timeout_defaults_to_60() -> None:
    objs = rendered(make_trainjob(), make_runtime({"coscheduling": {}}), CoschedulingPlugin())
    assert objs["PodGroup"][0]["spec"]["scheduleTimeoutSeconds"] == 60


def test_podgroup_goes_before_jobset() -> None:
    out = render(make_trainjob(), make_runtime(COSCHED), framework=framework(CoschedulingPlugin()))
    kinds = [o["kind"] for o in out]
    assert kinds.index("PodGroup") < kinds.index("JobSet")


# --- minResources ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "num_nodes", "expected"),
    [
        pytest.param(
            {
                "containers": [
                    _ctr("node", {"cpu": "1", "memory": "1Gi"}),
                    _ctr("side", {"cpu": 2}),
                ],
                "initContainers": [_ctr("init", {"cpu": "4", "memory": "512Mi"})],
            },
            2,
            # cpu: max(1 + 2, 4) = 4 per pod; memory: max(1Gi, 512Mi) = 1Gi per pod.
            {"cpu": "8", "memory": "2Gi"},
            id="init-container-larger-than-sum",
        ),
        pytest.param(
            {
                "containers": [_ctr("node", {"cpu": "3"}), _ctr("side", {"cpu": "500m"})],
                "initContainers": [_ctr("a", {"cpu": "2"}), _ctr("b", {"cpu": "1"})],
            },
            2,
            # max(3.5, max(2, 1)) = 3.5 per pod.
            {"cpu": "7"},
            id="sum-of-containers-larger-than-init",
        ),
        pytest.param(
            {
                "containers": [_ctr("node", {"cpu": "1", "memory": "1Gi"})],
                "overhead": {"cpu": "250m", "memory": "128Mi"},
            },
            3,
            {"cpu": "3750m", "memory": "3456Mi"},
            id="pod-overhead",
        ),
        pytest.param(
            {"containers": [_ctr("node", {"nvidia.com/gpu": "1", "cpu": "0.5"})]},
            4,
            {"cpu": "2", "nvidia.com/gpu": "4"},
            id="extended-resources-sorted",
        ),
        pytest.param({"containers": [_ctr("node")]}, 4, None, id="no-requests-omitted"),
    ],
)
def test_min_resources_of_trainer_pods(
    pod: dict[str, Any], num_nodes: int, expected: dict[str, str] | None
) -> None:
    jobs = [_job("node", c.ANCESTOR_TRAINER, pod)]
    objs = rendered(
        make_trainjob(num_nodes=num_nodes), make_runtime(COSCHED, jobs), CoschedulingPlugin()
    )
    spec = objs["PodGroup"][0]["spec"]
    assert spec["minMember"] == num_nodes
    assert spec.get("minResources") == expected


def test_min_resources_include_resources_per_node() -> None:
    """``trainer.resourcesPerNode`` is merged into the node container before counting."""
    trainjob = _trainjob_with(
        {
            "trainer": {
                "numNodes": 2,
                "resourcesPerNode": {"requests": {"nvidia.com/gpu": 2, "memory": "8Gi"}},
            }
        }
    )
    objs = rendered(trainjob, make_runtime(COSCHED), CoschedulingPlugin())
    assert objs["PodGroup"][0]["spec"]["minResources"] == {
        "cpu": "4",  # 2 initializers + 2 nodes, 1 CPU each
        "memory": "24Gi",  # 2 x 4Gi + 2 x 8Gi
        "nvidia.com/gpu": "4",
    }


def test_min_resources_mixed_units_and_zero_nodes() -> None:
    """Binary and decimal units add exactly; a zero-node trainer contributes nothing."""
    jobs = standard_jobs({"cpu": "1500m", "memory": "1G"})
    info = info_after_policies(make_trainjob(num_nodes=0), make_runtime(COSCHED, jobs))
    assert podgroup.min_member(info) == 2
    assert podgroup.min_resources_wire(info) == {"cpu": "3", "memory": "2G"}


# --- What admitted pods request: limits, LimitRange defaults, RuntimeClass overhead ----------


def _limit_range(name: str, **item: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "LimitRange",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"limits": [{"type": "Container", **item}]},
    }


def test_min_resources_count_what_admitted_pods_request() -> None:
    """A limit without a request counts as the request (pod defaulting); a container without
    either gets the namespace's LimitRange default (defaultRequest, else default, else max;
    the first LimitRange by name wins); the RuntimeClass's pod overhead is added."""
    node = {
        "runtimeClassName": "kata",
        "containers": [
            {"name": "node", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            {"name": "sidecar", "image": "i"},
        ],
    }
    jobs = [_job("node", c.ANCESTOR_TRAINER, node)]
    observed = Observed(
        limit_ranges=[
            _limit_range("b-later", defaultRequest={"cpu": "9", "ephemeral-storage": "1Gi"}),
            _limit_range("a-first", default={"cpu": "500m"}, max={"memory": "2Gi"}),
            {
                "kind": "LimitRange",
                "metadata": {"name": "pods"},
                "spec": {"limits": [{"type": "Pod", "max": {"cpu": "100"}}]},
            },
        ],
        runtime_classes={"kata": {"overhead": {"podFixed": {"cpu": "250m", "memory": "160Mi"}}}},
    )
    objs = rendered(
        make_trainjob(num_nodes=2),
        make_runtime(COSCHED, jobs),
        CoschedulingPlugin(),
        observed=observed,
    )
    assert objs["PodGroup"][0]["spec"]["minResources"] == {
        "cpu": "2500m",  # 2 pods x (2 containers x 500m + 250m overhead)
        "ephemeral-storage": "4Gi",  # 2 pods x 2 containers x 1Gi
        "memory": "8512Mi",  # 2 pods x (2 x 2Gi + 160Mi)
        "nvidia.com/gpu": "2",
    }


def test_min_resources_without_limit_ranges_or_runtime_classes_are_the_template() -> None:
    """Offline (nothing observed) the template's requests alone count, as upstream's."""
    node = {"runtimeClassName": "kata", "containers": [_ctr("node", {"cpu": "1"})]}
    objs = rendered(
        make_trainjob(num_nodes=3),
        make_runtime(COSCHED, [_job("node", c.ANCESTOR_TRAINER, node)]),
        CoschedulingPlugin(),
    )
    assert objs["PodGroup"][0]["spec"]["minResources"] == {"cpu": "3"}


# --- Replicas (this project's decision: count x replicas, as JobSet will create them) ----------


def test_non_ancestor_job_with_replicas_counts_every_pod() -> None:
    jobs = [
        _job("launcher", None, {"containers": [_ctr("node", {"cpu": "1"})]}),
        _job(
            "workers",
            None,
            {"containers": [_ctr("worker", {"cpu": "2", "memory": "1Gi"})]},
            replicas=2,
        ),
        # The runtime asks for 3 trainer replicas; the JobSet builder forces 1.
        _job("node", c.ANCESTOR_TRAINER, {"containers": [_ctr("node", {"cpu": "1"})]}, replicas=3),
    ]
    jobs[1]["template"]["spec"]["parallelism"] = 3
    objs = rendered(make_trainjob(num_nodes=4), make_runtime(COSCHED, jobs), CoschedulingPlugin())
    spec = objs["PodGroup"][0]["spec"]
    # launcher 1 + workers 2 Jobs x 3 pods + trainer 1 Job x 4 pods.
    assert spec["minMember"] == 11
    assert spec["minResources"] == {"cpu": "17", "memory": "6Gi"}
    replicas = {
        j["name"]: j.get("replicas", 1) for j in objs["JobSet"][0]["spec"]["replicatedJobs"]
    }
    assert replicas == {"launcher": 1, "workers": 2, "node": 1}


# --- (Re)apply rule ----------------------------------------------------------------------------

EXISTING_PG = {"metadata": {"name": "job", "namespace": "ns"}, "spec": {"minMember": 102}}


@pytest.mark.parametrize("plugin", [CoschedulingPlugin(), VolcanoPlugin()], ids=lambda p: p.name)
@pytest.mark.parametrize(
    ("existing", "suspend", "built"),
    [
        (None, False, True),
        (None, True, True),
        (EXISTING_PG, False, False),
        (EXISTING_PG, True, True),
    ],
    ids=["absent", "absent-suspended", "exists-running", "exists-suspended"],
)
def test_podgroup_reapplied_only_when_absent_or_suspended(
    plugin: Any, existing: dict[str, Any] | None, suspend: bool, built: bool
) -> None:
    policy = COSCHED if isinstance(plugin, CoschedulingPlugin) else VOLCANO
    observed = Observed(pod_group=existing)
    objs = rendered(make_trainjob(suspend=suspend), make_runtime(policy), plugin, observed=observed)
    assert ("PodGroup" in objs) is built
    if built:
        assert objs["PodGroup"][0]["spec"]["minMember"] == 102


def test_should_apply_ignores_jobset_suspension() -> None:
    """Only the TrainJob's suspend matters for the PodGroup."""
    info = new_info(make_trainjob(), make_runtime(COSCHED), Observed(pod_group=EXISTING_PG))
    assert not podgroup.should_apply(info)
    info = new_info(
        make_trainjob(suspend=True), make_runtime(COSCHED), Observed(pod_group=EXISTING_PG)
    )
    assert podgroup.should_apply(info)


# --- Pod labels and annotations on the rendered JobSet -----------------------------------------


def _pod_meta(jobset: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        j["name"]: j["template"]["spec"]["template"].get("metadata", {})
        for j in jobset["spec"]["replicatedJobs"]
    }


def test_coscheduling_labels_every_pod_template() -> None:
    jobs = standard_jobs()
    jobs[2]["template"]["spec"]["template"]["metadata"] = {"labels": {"team": "ml"}}
    objs = rendered(make_trainjob(), make_runtime(COSCHED, jobs), CoschedulingPlugin())
    metas = _pod_meta(objs["JobSet"][0])
    assert set(metas) == {"dataset-initializer", "model-initializer", "node"}
    for name, meta in metas.items():
        assert meta["labels"][c.LABEL_COSCHEDULING_POD_GROUP] == "job", name
        assert "annotations" not in meta, name
    assert metas["node"]["labels"]["team"] == "ml"


def test_volcano_annotates_every_pod_template() -> None:
    objs = rendered(make_trainjob(), make_runtime(VOLCANO), VolcanoPlugin())
    metas = _pod_meta(objs["JobSet"][0])
    assert len(metas) == 3
    for name, meta in metas.items():
        assert meta["annotations"] == {c.ANNOTATION_VOLCANO_GROUP_NAME: "job"}, name
        assert "labels" not in meta, name


@pytest.mark.parametrize("plugin", [CoschedulingPlugin(), VolcanoPlugin()], ids=lambda p: p.name)
@pytest.mark.parametrize(
    "policy", [None, {"coscheduling": {}}, VOLCANO], ids=["none", "coscheduling", "volcano"]
)
def test_inactive_without_its_policy(plugin: Any, policy: dict[str, Any] | None) -> None:
    active = policy is not None and (
        ("coscheduling" in policy) == isinstance(plugin, CoschedulingPlugin)
    )
    objs = rendered(make_trainjob(), make_runtime(policy), plugin)
    assert ("PodGroup" in objs) is active
    metas = _pod_meta(objs["JobSet"][0])
    assert all(bool(meta) is active for meta in metas.values())


# --- Volcano: queue, priorityClassName, networkTopology ----------------------------------------

QUEUE = c.ANNOTATION_VOLCANO_QUEUE


@pytest.mark.parametrize(
    ("runtime_annotations", "patch", "expected"),
    [
        (None, None, None),
        ({QUEUE: "research"}, None, "research"),
        ({QUEUE: "research"}, {QUEUE: "urgent"}, "urgent"),
        (None, {QUEUE: "urgent"}, "urgent"),
        ({QUEUE: ""}, None, None),  # empty is left out (admission rejects it)
    ],
    ids=["absent", "runtime", "patch-overrides", "patch-only", "empty"],
)
def test_volcano_queue(
    runtime_annotations: dict[str, str] | None,
    patch: dict[str, str] | None,
    expected: str | None,
) -> None:
    spec = {"runtimePatches": [_annotation_patch(patch)]} if patch is not None else {}
    trainjob = _trainjob_with(spec)
    runtime = make_runtime(VOLCANO, annotations=runtime_annotations)
    objs = rendered(trainjob, runtime, VolcanoPlugin())
    assert objs["PodGroup"][0]["spec"].get("queue") == expected


def _annotation_patch(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "manager": "kueue.x-k8s.io/manager",
        "trainingRuntimeSpec": {"template": {"metadata": {"annotations": annotations}}},
    }


def _trainjob_with(extra: dict[str, Any], suspend: bool = False) -> TrainJob:
    base = make_trainjob(suspend=suspend).to_wire()
    base["spec"].update(extra)
    return TrainJob.from_wire(base)


def _with_priority(jobs: list[dict[str, Any]], classes: dict[str, str]) -> list[dict[str, Any]]:
    for job in jobs:
        if job["name"] in classes:
            job["template"]["spec"]["template"]["spec"]["priorityClassName"] = classes[job["name"]]
    return jobs


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        ({}, None),
        ({"dataset-initializer": "low"}, "low"),
        ({"dataset-initializer": "low", "node": "high"}, "high"),
        ({"model-initializer": "mid", "dataset-initializer": "low"}, "mid"),
        ({"node": ""}, None),
    ],
    ids=["none", "one", "last-wins", "runtime-order-not-dict-order", "empty-ignored"],
)
def test_volcano_priority_class_last_set_wins(
    classes: dict[str, str], expected: str | None
) -> None:
    runtime = make_runtime(VOLCANO, _with_priority(standard_jobs(), classes))
    objs = rendered(make_trainjob(), runtime, VolcanoPlugin())
    assert objs["PodGroup"][0]["spec"].get("priorityClassName") == expected


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ({}, None),
        ({"networkTopology": {}}, {"mode": "hard", "highestTierAllowed": 1}),
        ({"networkTopology": {"mode": "soft"}}, {"mode": "soft", "highestTierAllowed": 1}),
        (
            {"networkTopology": {"mode": "hard", "highestTierAllowed": 3}},
            {"mode": "hard", "highestTierAllowed": 3},
        ),
    ],
    ids=["unset", "defaults", "soft", "tier-3"],
)
def test_volcano_network_topology(policy: dict[str, Any], expected: dict[str, Any] | None) -> None:
    objs = rendered(make_trainjob(), make_runtime({"volcano": policy}), VolcanoPlugin())
    assert objs["PodGroup"][0]["spec"].get("networkTopology") == expected


def test_volcano_full_podgroup() -> None:
    runtime = make_runtime(
        {"volcano": {"networkTopology": {"mode": "soft", "highestTierAllowed": 2}}},
        _with_priority(standard_jobs(), {"node": "high"}),
        annotations={QUEUE: "research"},
    )
    objs = rendered(make_trainjob(num_nodes=2), runtime, VolcanoPlugin())
    assert objs["PodGroup"] == [
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": META,
            "spec": {
                "minMember": 4,
                "minResources": {"cpu": "4", "memory": "16Gi"},
                "queue": "research",
                "priorityClassName": "high",
                "networkTopology": {"mode": "soft", "highestTierAllowed": 2},
            },
        }
    ]
    # The queue annotation stays on the JobSet too.
    assert objs["JobSet"][0]["metadata"]["annotations"] == {QUEUE: "research"}


# --- Volcano admission helpers -----------------------------------------------------------------


def _validate(
    annotations: dict[str, str] | None = None,
    classes: dict[str, str] | None = None,
    known: tuple[str, ...] = ("high",),
    policy: dict[str, Any] | None = VOLCANO,
) -> list[str]:
    runtime = make_runtime(policy, _with_priority(standard_jobs(), classes or {}), annotations)
    info = new_info(make_trainjob(), runtime)
    return [str(e) for e in volcano.validate(info, known)]


def _pc_error(name: str) -> str:
    return (
        f'spec.templateSpec.priorityClassName: Invalid value: "{name}": PriorityClass "{name}" '
        f'doesn\'t exist: priorityclasses.scheduling.k8s.io "{name}" not found'
    )


EMPTY_QUEUE_ERROR = (
    'spec.annotations[scheduling.volcano.sh/queue-name]: Invalid value: "": '
    "Volcano queue name must not be empty"
)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, []),
        ({"annotations": {QUEUE: "research"}}, []),
        ({"annotations": {QUEUE: ""}}, [EMPTY_QUEUE_ERROR]),
        ({"classes": {"node": "high"}}, []),
        ({"classes": {"node": "system-cluster-critical"}}, []),
        ({"classes": {"node": "system-node-critical"}, "known": ()}, []),
        ({"classes": {"node": "missing"}}, [_pc_error("missing")]),
        (
            {"classes": {"dataset-initializer": "a", "model-initializer": "a", "node": "b"}},
            [_pc_error("a"), _pc_error("b")],
        ),
        (
            {"annotations": {QUEUE: ""}, "classes": {"node": "missing"}},
            [EMPTY_QUEUE_ERROR, _pc_error("missing")],
        ),
        (
            {"annotations": {QUEUE: ""}, "classes": {"node": "missing"}, "policy": COSCHED},
            [],
        ),
    ],
    ids=[
        "nothing-set",
        "queue-set",
        "queue-empty",
        "known-class",
        "system-cluster-critical",
        "system-node-critical",
        "unknown-class",
        "one-error-per-name",
        "both",
        "not-volcano",
    ],
)
def test_volcano_validate(kwargs: dict[str, Any], expected: list[str]) -> None:
    assert _validate(**kwargs) == expected


def test_volcano_validate_error_fields() -> None:
    runtime = make_runtime(VOLCANO, annotations={QUEUE: ""})
    errors = volcano.validate(new_info(make_trainjob(), runtime), [])
    assert errors == [
        FieldError(
            "spec.annotations[scheduling.volcano.sh/queue-name]",
            INVALID,
            "Volcano queue name must not be empty",
        )
    ]
    assert errors[0].value == ""
