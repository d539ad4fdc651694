"""A deterministic corpus of TrainJobs for the side-by-side test: upstream Kubeflow Trainer
v2.3.0's Go controller and ours run on the same real cluster, the corpus is applied to each,
and the JobSets, Secrets, ConfigMaps, PodGroups and TrainJob statuses they write are compared.

The corpus is made of

- ``cluster_runtimes()``: upstream's nine released ClusterTrainingRuntimes, read verbatim from
  ``shared/upstream-release/runtimes``;
- ``namespaced_runtimes()`` (:mod:`corpus_shapes`): TrainingRuntimes for what those do not
  cover (PlainML, coscheduling, Volcano, envInjection, MPI shapes, initializers, Flux);
- ``trainjobs(count, seed)``: TrainJobs (no namespace), each valid one a random combination of
  the v2.3 fields: runtimeRef (both kinds, apiGroup and kind spelled out or defaulted),
  numNodes, numProcPerNode, resourcesPerNode, image/command/args, env (values and fieldRefs),
  dataset and model initializers, runtimePatches from one or two managers (JobSet, Job and pod
  metadata; nodeSelector, tolerations, volumes and volumeMounts, sidecar env,
  serviceAccountName), suspend, managedBy, labels, annotations and activeDeadlineSeconds.
  Names are ``c-<index>-<runtime>[-<filler>]``, at most 40 characters and never longer than
  the runtime's generated names allow (some exactly that long).

Every TrainJob carries ``sidebyside.kubeflow.org/expect``: ``valid``, or ``invalid`` for the
~8% the CRD schema or the admission webhook rejects, each broken in one way named by
``sidebyside.kubeflow.org/invalid-reason``. About 2% of the valid ones are
``managedBy: kueue.x-k8s.io/multikueue``: admitted, and neither controller may touch them.
Only v2.3 fields are used (no podTemplateOverrides, no fields of this project's own).

Reasons in ``UPSTREAM_ADMITS`` are rejected by our webhook only: upstream admits them and fails
later (they also carry ``sidebyside.kubeflow.org/upstream-admits: "true"``).

    python hack/sidebyside/corpus.py --count 500 --seed 0 --out DIR

writes ``DIR/runtimes.yaml`` and ``DIR/trainjobs.yaml`` and prints a coverage summary to stderr.
"""

from __future__ import annotations

import argparse
import random
import string
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import yaml
from corpus_shapes import (
    API_VERSION,
    MANAGERS,
    Facts,
    Obj,
    Rng,
    env_var,
    facts,
    initializer_spec,
    runtime_patch,
    runtime_patches,
    runtime_ref,
    trainer_spec,
    training_runtimes,
)

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
RELEASED_RUNTIMES = SHARED / "upstream-release" / "runtimes"

EXPECT = "sidebyside.kubeflow.org/expect"
REASON = "sidebyside.kubeflow.org/invalid-reason"
ADMITTED_UPSTREAM = "sidebyside.kubeflow.org/upstream-admits"
MANAGED_BY_TRAINER = "trainer.kubeflow.org/trainjob-controller"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
INVALID_SHARE = 0.08
MULTIKUEUE_SHARE = 0.02
MAX_NAME_LENGTH = 40

UPSTREAM_ADMITS = frozenset({"name-over-budget"})
"""Upstream only checks RFC 1035 and 63 characters on the TrainJob name
(https://github.com/kubeflow/trainer/issues/2735): a name whose generated Job or Pod names
exceed 63 is admitted and then fails inside JobSet's webhook (event
TrainJobResourcesCreationFailed, no JobSet). Our webhook rejects it up front, on purpose
(trainer/admission/names.py)."""

DISPUTED: list[tuple[str, str]] = []
"""Cases where our validator disagrees with what the spec says upstream does: (reason, why).
None so far."""

SHORT = {
    "torch-distributed": "torch",
    "deepspeed-distributed": "ds",
    "mlx-distributed": "mlx",
    "jax-distributed": "jax",
    "xgboost-distributed": "xgb",
    "torchtune-llama3.2-1b": "tt1b",
    "torchtune-llama3.2-3b": "tt3b",
    "torchtune-qwen2.5-1.5b": "ttqwen",
    "torch-distributed-with-cache": "cache",
}
ALNUM = string.ascii_lowercase + string.digits


def cluster_runtimes() -> list[Obj]:
    """Upstream's released ClusterTrainingRuntimes, as loaded from their files."""
    out = []
    for path in sorted(RELEASED_RUNTIMES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        assert isinstance(doc, dict) and doc["kind"] == "ClusterTrainingRuntime", path
        out.append(doc)
    return out


def namespaced_runtimes() -> list[Obj]:
    """The TrainingRuntimes the corpus adds (no namespace: applied where the TrainJobs go)."""
    return training_runtimes()


def _pad(rng: Rng, base: str, length: int) -> str:
    if length - len(base) < 2:
        return base
    return base + "-" + "".join(rng.choice(ALNUM) for _ in range(length - len(base) - 1))


def _name(rng: Rng, index: str, rt: Facts) -> str:
    base = f"c-{index}-{SHORT.get(rt.name, rt.name)}"
    cap = min(MAX_NAME_LENGTH, rt.name_budget)
    assert len(base) <= cap, (base, cap)
    return _pad(rng, base, cap if rng.random() < 0.15 else rng.randint(len(base), cap))


def valid_trainjob(rng: Rng, index: str, rt: Facts) -> Obj:
    """One valid TrainJob on ``rt``: a random combination of the fields (module docstring)."""
    spec: Obj = {"runtimeRef": runtime_ref(rng, rt)}
    if (init := initializer_spec(rng, rt)) is not None:
        spec["initializer"] = init
    if (trainer := trainer_spec(rng, rt)) is not None:
        spec["trainer"] = trainer
    if patches := runtime_patches(rng, rt):
        spec["runtimePatches"] = patches
    if (suspend := rng.choice([None, None, False, True, True])) is not None:
        spec["suspend"] = suspend
    if rng.random() < 0.4:
        spec["managedBy"] = MANAGED_BY_TRAINER
    if rng.random() < 0.25:
        spec["activeDeadlineSeconds"] = rng.choice([3600, 7200, 86400])
    meta: Obj = {"name": _name(rng, index, rt)}
    if rng.random() < 0.4:
        meta["labels"] = {"team": rng.choice(["ml", "research"]), "example.com/tier": "gold"}
    annotations = {EXPECT: "valid"}
    if rng.random() < 0.3:
        annotations["example.com/owner"] = rng.choice(["alice", "bob"])
    meta["annotations"] = annotations
    return {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": meta, "spec": spec}


# --------------------------------------------------------------------------- invalid ones

Breaker = Callable[[Rng, Obj, Facts], None]


def _trainer_of(job: Obj) -> Obj:
    trainer: Obj = job["spec"].setdefault("trainer", {})
    return trainer


def _add_env(job: Obj, name: str, value: str) -> None:
    _trainer_of(job).setdefault("env", []).append(env_var(name, value))


def _first_patch(rng: Rng, job: Obj, rt: Facts) -> Obj:
    patches = job["spec"].setdefault("runtimePatches", [])
    if not patches:
        patches.append(runtime_patch(rng, rt, MANAGERS[0], 0))
    patch: Obj = patches[0]
    return patch


def _patch_jobs(rng: Rng, job: Obj, rt: Facts) -> list[Obj]:
    template = _first_patch(rng, job, rt)["trainingRuntimeSpec"]["template"]
    jobs: list[Obj] = template.setdefault("spec", {}).setdefault("replicatedJobs", [])
    return jobs


def _tune(job: Obj, *args: str) -> None:
    trainer = _trainer_of(job)
    trainer["command"] = ["tune", "run"]
    trainer["args"] = [a for a in trainer.get("args", []) if not a.startswith("model.")] + list(
        args
    )


def _set_name(job: Obj, name: str) -> None:
    job["metadata"]["name"] = name


def _long_name(rng: Rng, job: Obj, low: int, high: int) -> None:
    _set_name(job, _pad(rng, job["metadata"]["name"], rng.randint(low, high)))


def _container_patch(rng: Rng, job: Obj, rt: Facts, container: str, patch: Obj) -> None:
    trainer_job = rt.trainer_job.name
    entry = {"name": container, **patch}
    jobs = _patch_jobs(rng, job, rt)
    jobs[:] = [j for j in jobs if j["name"] != trainer_job]
    pod = {"spec": {"containers": [entry]}}
    jobs.append({"name": trainer_job, "template": {"spec": {"template": pod}}})


def _nodes(n: int) -> Breaker:
    return lambda rng, job, rt: _trainer_of(job).update(numNodes=n + rng.randint(0, 2))


def _tune_nodes(rng: Rng, job: Obj, rt: Facts) -> None:
    _tune(job)
    _nodes(2)(rng, job, rt)


def _qlora_multi_device(rng: Rng, job: Obj, rt: Facts) -> None:
    _tune(job, "model.lora_attn_modules=[q_proj,v_proj]", "model.quantize_base=true")
    _trainer_of(job).update(numNodes=1, numProcPerNode=rng.choice([2, 4]))


BREAKERS: list[tuple[str, Callable[[Facts], bool], Breaker]] = [
    (
        "managed-by-unknown",
        lambda rt: True,
        lambda rng, job, rt: job["spec"].update(
            managedBy=rng.choice(["example.com/other-controller", "kueue.x-k8s.io/manager"])
        ),
    ),
    (
        "runtime-missing",
        lambda rt: True,
        lambda rng, job, rt: job["spec"]["runtimeRef"].update(name="missing-runtime"),
    ),
    (
        "runtime-unsupported-group",
        lambda rt: True,
        lambda rng, job, rt: job["spec"]["runtimeRef"].update(apiGroup="example.com"),
    ),
    (
        "runtime-unsupported-kind",
        lambda rt: True,
        lambda rng, job, rt: job["spec"]["runtimeRef"].update(kind="Runtime"),
    ),
    (
        "manager-not-domain-prefixed",
        lambda rt: True,
        lambda rng, job, rt: _first_patch(rng, job, rt).update(
            manager=rng.choice(["patcher", "example.com/", "Example.com/patcher"])
        ),
    ),
    (
        "patch-unknown-job",
        lambda rt: True,
        lambda rng, job, rt: _patch_jobs(rng, job, rt).append(
            {"name": "ghost", "template": {"metadata": {"labels": {"a": "b"}}}}
        ),
    ),
    (
        "patch-unknown-container",
        lambda rt: True,
        lambda rng, job, rt: _container_patch(
            rng, job, rt, "ghost", {"volumeMounts": [{"name": "x", "mountPath": "/x"}]}
        ),
    ),
    (
        "patch-env-on-node",
        lambda rt: True,
        lambda rng, job, rt: _container_patch(rng, job, rt, "node", {"env": [env_var("A", "1")]}),
    ),
    (
        "nproc-string",
        lambda rt: rt.framework in ("torch", "torchtune"),
        lambda rng, job, rt: _trainer_of(job).update(
            numProcPerNode=rng.choice(["auto", "cpu", "gpu"])
        ),
    ),
    (
        "nproc-below-1",
        lambda rt: True,
        lambda rng, job, rt: _trainer_of(job).update(numProcPerNode=rng.choice([0, -2])),
    ),
    (
        "num-nodes-negative",
        lambda rt: True,
        lambda rng, job, rt: _trainer_of(job).update(numNodes=rng.choice([-1, -3])),
    ),
    (
        "storage-uri-invalid",
        lambda rt: rt.has_dataset,
        lambda rng, job, rt: job["spec"].update(
            initializer={"dataset": {"storageUri": rng.choice(["invalid-uri", "s3://", "1x://a"])}}
        ),
    ),
    (
        "deadline-below-1",
        lambda rt: True,
        lambda rng, job, rt: job["spec"].update(activeDeadlineSeconds=rng.choice([0, -5])),
    ),
    (
        "name-not-rfc1035",
        lambda rt: True,
        lambda rng, job, rt: _set_name(job, "9" + job["metadata"]["name"][1:]),
    ),
    (
        "name-over-63",
        lambda rt: True,
        lambda rng, job, rt: _long_name(rng, job, 64, 70),
    ),
    (
        "name-over-budget",
        lambda rt: rt.name_budget < 63,
        lambda rng, job, rt: _long_name(rng, job, rt.name_budget + 1, 63),
    ),
    (
        "dataset-without-initializer-job",
        lambda rt: rt.job("dataset-initializer") is None,
        lambda rng, job, rt: job["spec"].update(
            initializer={"dataset": {"storageUri": "hf://tatsu-lab/alpaca"}}
        ),
    ),
    (
        # Upstream's released cache runtime: its dataset-initializer does not mount the
        # initializer volume, so any dataset initializer is refused.
        "dataset-initializer-without-mount",
        lambda rt: rt.job("dataset-initializer") is not None and not rt.has_dataset,
        lambda rng, job, rt: job["spec"].update(
            initializer={"dataset": {"storageUri": "s3://b/k"}}
        ),
    ),
    (
        "model-without-initializer-job",
        lambda rt: not rt.has_model,
        lambda rng, job, rt: job["spec"].update(
            initializer={"model": {"storageUri": "hf://org/model"}}
        ),
    ),
    (
        "reserved-env-torch",
        lambda rt: rt.framework in ("torch", "torchtune"),
        lambda rng, job, rt: _add_env(job, rng.choice(["PET_NNODES", "PET_MASTER_ADDR"]), "x"),
    ),
    (
        "reserved-env-mpi",
        lambda rt: rt.framework == "mpi",
        lambda rng, job, rt: _add_env(job, "OMPI_MCA_orte_default_hostfile", "/tmp/hosts"),
    ),
    (
        "reserved-env-xgboost",
        lambda rt: rt.framework == "xgboost",
        lambda rng, job, rt: _add_env(job, rng.choice(["DMLC_NUM_WORKER", "DMLC_TASK_ID"]), "1"),
    ),
    (
        "torchtune-multi-node",
        lambda rt: rt.framework == "torchtune",
        _tune_nodes,
    ),
    (
        "torchtune-immutable-arg",
        lambda rt: rt.framework == "torchtune",
        lambda rng, job, rt: _tune(job, rng.choice(["output_dir=/tmp/o", "tokenizer.path=/t"])),
    ),
    (
        "torchtune-qlora-qwen",
        lambda rt: "qwen" in rt.name,
        lambda rng, job, rt: _tune(
            job, "model.lora_attn_modules=[q_proj,v_proj]", "model.quantize_base=True"
        ),
    ),
    (
        # numProcPerNode is refused only here: QLoRA on llama3.2 runs on one device.
        "torchtune-qlora-multi-device",
        lambda rt: "llama" in rt.name,
        _qlora_multi_device,
    ),
    (
        "volcano-empty-queue",
        lambda rt: rt.volcano,
        lambda rng, job, rt: _first_patch(rng, job, rt)["trainingRuntimeSpec"]["template"].update(
            metadata={"annotations": {"scheduling.volcano.sh/queue-name": ""}}
        ),
    ),
    (
        "mpi-multi-node-without-launcher",
        lambda rt: rt.launcher_as_node and rt.job("launcher") is None,
        _nodes(2),
    ),
    (
        "patch-duplicate-manager",
        lambda rt: True,
        lambda rng, job, rt: job["spec"].update(
            runtimePatches=[runtime_patch(rng, rt, MANAGERS[1], k) for k in range(2)]
        ),
    ),
]


def _invalid_trainjob(rng: Rng, index: str, reason: str, runtimes: list[Facts]) -> Obj:
    _, applies, breaker = next(b for b in BREAKERS if b[0] == reason)
    rt = rng.choice([r for r in runtimes if applies(r)])
    job = valid_trainjob(rng, index, rt)
    breaker(rng, job, rt)
    annotations = job["metadata"]["annotations"]
    annotations[EXPECT] = "invalid"
    annotations[REASON] = reason
    if reason in UPSTREAM_ADMITS:
        annotations[ADMITTED_UPSTREAM] = "true"
    return job


def trainjobs(count: int = 500, seed: int = 0) -> list[Obj]:
    """``count`` TrainJobs, the same for the same (count, seed) (module docstring)."""
    rng = random.Random(seed)
    runtimes = [facts(r) for r in cluster_runtimes() + namespaced_runtimes()]
    width = max(4, len(str(count - 1)))
    invalid = set(rng.sample(range(count), round(count * INVALID_SHARE)))
    valid = [i for i in range(count) if i not in invalid]
    multikueue = set(rng.sample(valid, min(len(valid), round(count * MULTIKUEUE_SHARE))))
    reasons = [b[0] for b in BREAKERS]
    rng.shuffle(reasons)
    cycle: list[Facts] = []
    jobs = []
    broken = 0
    for i in range(count):
        index = f"{i:0{width}d}"
        if i in invalid:  # one reason after the other, so that each comes up
            reason = reasons[broken % len(reasons)]
            broken += 1
            jobs.append(_invalid_trainjob(rng, index, reason, runtimes))
            continue
        if not cycle:
            cycle = rng.sample(runtimes, len(runtimes))
        job = valid_trainjob(rng, index, cycle.pop())
        if i in multikueue:
            job["spec"]["managedBy"] = MANAGED_BY_MULTIKUEUE
        jobs.append(job)
    return jobs


# --------------------------------------------------------------------------- coverage


def _patch_kinds(patch: Obj) -> list[str]:
    template = patch.get("trainingRuntimeSpec", {}).get("template", {})
    kinds = ["jobset-metadata"] if "metadata" in template else []
    for rjob in template.get("spec", {}).get("replicatedJobs", []):
        job_template = rjob.get("template", {})
        if "metadata" in job_template:
            kinds.append("job-metadata")
        pod = job_template.get("spec", {}).get("template", {})
        if "metadata" in pod:
            kinds.append("pod-metadata")
        spec = pod.get("spec", {})
        kinds += [
            k for k in ("nodeSelector", "tolerations", "volumes", "serviceAccountName") if k in spec
        ]
        for ctr in spec.get("containers", []):
            kinds += [f"containers.{k}" for k in ("env", "volumeMounts") if k in ctr]
    return kinds


def _trainer_kinds(trainer: Obj | None) -> list[str]:
    if trainer is None:
        return ["trainer:absent"]
    kinds = ["trainer:empty"] if not trainer else []
    kinds.append(f"numNodes:{trainer.get('numNodes', 'absent')}")
    nproc = trainer.get("numProcPerNode", "absent")
    kinds.append(f"numProcPerNode:{'int' if isinstance(nproc, int) else nproc}")
    for part, resources in trainer.get("resourcesPerNode", {}).items():
        kinds += [f"resourcesPerNode.{part}.{name}" for name in resources]
    kinds += [f"trainer.{k}" for k in ("image", "command", "args") if k in trainer]
    if trainer.get("command") == ["tune", "run"]:
        kinds.append("trainer.command:tune-run")
    for env in trainer.get("env", []):
        kinds.append("trainer.env:fieldRef" if "valueFrom" in env else "trainer.env:value")
    return kinds


def kinds_covered(jobs: list[Obj]) -> dict[str, int]:
    """How many TrainJobs show each dimension of the corpus (``dimension:value`` keys)."""
    seen: Counter[str] = Counter()
    for job in jobs:
        meta, spec = job["metadata"], job["spec"]
        annotations = meta.get("annotations", {})
        kinds = [f"expect:{annotations.get(EXPECT)}"]
        if REASON in annotations:
            kinds.append(f"invalid:{annotations[REASON]}")
        ref = spec["runtimeRef"]
        kinds += [
            f"runtime:{ref['name']}",
            f"runtimeRef.kind:{ref.get('kind', 'default')}",
            f"runtimeRef.apiGroup:{'set' if 'apiGroup' in ref else 'default'}",
        ]
        kinds += _trainer_kinds(spec.get("trainer"))
        for step, config in spec.get("initializer", {}).items():
            kinds.append(f"initializer.{step}")
            kinds += [f"initializer.{k}" for k in ("storageUri", "env", "secretRef") if k in config]
        patches = spec.get("runtimePatches", [])
        kinds.append(f"runtimePatches:{len(patches)}")
        for patch in patches:
            kinds += [f"runtimePatches.{k}" for k in sorted(set(_patch_kinds(patch)))]
        kinds.append(f"suspend:{spec.get('suspend', 'absent')}")
        kinds.append(f"managedBy:{spec.get('managedBy', 'absent')}")
        if "activeDeadlineSeconds" in spec:
            kinds.append("activeDeadlineSeconds")
        if meta.get("labels"):
            kinds.append("metadata.labels")
        if set(annotations) - {EXPECT, REASON, ADMITTED_UPSTREAM}:
            kinds.append("metadata.annotations")
        seen.update(set(kinds))
    return dict(sorted(seen.items()))


# --------------------------------------------------------------------------- CLI


def write(out: Path, count: int, seed: int) -> dict[str, int]:
    """Write ``runtimes.yaml`` and ``trainjobs.yaml`` into ``out``; return the coverage."""
    jobs = trainjobs(count, seed)
    out.mkdir(parents=True, exist_ok=True)
    runtimes = cluster_runtimes() + namespaced_runtimes()
    (out / "runtimes.yaml").write_text(yaml.safe_dump_all(runtimes, sort_keys=False))
    (out / "trainjobs.yaml").write_text(yaml.safe_dump_all(jobs, sort_keys=False))
    return kinds_covered(jobs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    coverage = write(args.out, args.count, args.seed)
    width = max(map(len, coverage), default=0)
    for kind, n in coverage.items():
        print(f"{kind:<{width}}  {n}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
