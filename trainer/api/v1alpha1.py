"""Kubeflow Trainer ``trainer.kubeflow.org/v1alpha1`` as of v2.3: TrainJob, TrainingRuntime and
ClusterTrainingRuntime, with every field, CRD default and validation rule of upstream's CRDs.

Objects stored under an older schema still parse: removed fields (``podTemplateOverrides``,
``spec.labels``) are kept as extra fields, and ``trainer.numProcPerNode`` still accepts the
v2.1 strings (``auto``) although the CRD now says integer.

Beyond upstream (additive optional fields; every upstream object stays valid and round-trips
unchanged): ``mlPolicy.torch.elasticPolicy`` (v2.1's shape, which v2.2 removed, brought back and
implemented: torchrun elastic rendezvous), ``mlPolicy.tensorflow`` (TF_CONFIG) and
``mlPolicy.paddle`` (PaddlePaddle collective env).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from trainer.api import constants as c
from trainer.jobset.types import JobSetSpec
from trainer.machinery.models.base import IMMUTABLE, K8sModel, Rule, Schema, TopLevel
from trainer.machinery.models.core import (
    Condition,
    Container,
    EnvVar,
    Int32,
    Int64,
    LocalObjectReference,
    ObjectMeta,
    PodSchedulingGate,
    ResourceRequirements,
    Toleration,
    Volume,
    VolumeMount,
)

GROUP = c.GROUP
VERSION = c.VERSION
API_VERSION = c.API_VERSION

ENV_LIST = Schema(list_type="map", list_map_keys=("name",), max_items=128)


# ---------------------------------------------------------------------------------------------
# TrainJob


class RuntimeRef(K8sModel):
    """The runtime a TrainJob runs on."""

    name: Annotated[str, Schema(min_length=1, max_length=253)]
    """Name of the runtime."""
    api_group: Annotated[str, Schema(max_length=253)] = GROUP
    """API group of the runtime."""
    kind: Annotated[str, Schema(max_length=253)] = c.KIND_CLUSTER_TRAINING_RUNTIME
    """Kind of the runtime: ClusterTrainingRuntime or TrainingRuntime."""


STORAGE_URI = Annotated[
    str | None,
    Schema(
        max_length=2048,
        rules=(
            Rule(
                "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",
                "storageUri may be empty, or it must be a valid URI (scheme://...)",
            ),
        ),
    ),
]


class DatasetInitializer(K8sModel):
    """Where to fetch the dataset from before training."""

    storage_uri: STORAGE_URI = None
    """URI of the dataset (``hf://``, ``s3://``, ``cache://``)."""
    env: Annotated[list[EnvVar] | None, ENV_LIST] = None
    """Environment of the dataset initializer container."""
    secret_ref: LocalObjectReference | None = None
    """Secret whose keys become environment variables of the initializer."""


class ModelInitializer(K8sModel):
    """Where to fetch the pre-trained model from before training."""

    storage_uri: STORAGE_URI = None
    """URI of the model (``hf://``, ``s3://``)."""
    env: Annotated[list[EnvVar] | None, ENV_LIST] = None
    """Environment of the model initializer container."""
    secret_ref: LocalObjectReference | None = None
    """Secret whose keys become environment variables of the initializer."""


class Initializer(K8sModel):
    """Dataset and model initialization steps."""

    dataset: DatasetInitializer | None = None
    model: ModelInitializer | None = None


class Trainer(K8sModel):
    """Overrides of the runtime's trainer step."""

    image: Annotated[str | None, Schema(max_length=500)] = None
    """Container image of the training nodes."""
    command: Annotated[
        list[str] | None, Schema(list_type="atomic", max_items=128, item_max_length=1048576)
    ] = None
    """Entrypoint of the training nodes (replaces the runtime's)."""
    args: Annotated[
        list[str] | None, Schema(list_type="atomic", max_items=128, item_max_length=1048576)
    ] = None
    """Arguments of the entrypoint (replace the runtime's)."""
    env: Annotated[list[EnvVar] | None, ENV_LIST] = None
    """Environment of the training node container."""
    num_nodes: Annotated[Int32 | None, Schema(minimum=0)] = None
    """Number of training nodes."""
    resources_per_node: ResourceRequirements | None = None
    """Compute resources of each training node (merged into the runtime's)."""
    num_proc_per_node: Annotated[
        int | str | None,
        Schema(
            type="integer",
            format="int32",
            rules=(Rule("self >= 1", "numProcPerNode must be greater than or equal to 1"),),
        ),
    ] = None
    """Processes per node; unset means "auto" for Torch."""


class ContainerPatch(K8sModel):
    """Changes to one container of a replicated job's pods."""

    name: Annotated[str, Schema(min_length=1, max_length=253)]
    """Name of an existing container."""
    env: Annotated[list[EnvVar] | None, ENV_LIST] = None
    volume_mounts: Annotated[
        list[VolumeMount] | None,
        Schema(list_type="map", list_map_keys=("name",), max_items=128),
    ] = None
    security_context: Annotated[
        dict[str, Any] | None, Schema(kube="io.k8s.api.core.v1.SecurityContext")
    ] = None


class PodSpecPatch(K8sModel):
    """The pod fields a runtime patch may change."""

    service_account_name: Annotated[str | None, Schema(max_length=253, rules=(IMMUTABLE,))] = None
    node_selector: dict[str, str] | None = None
    affinity: Annotated[dict[str, Any] | None, Schema(kube="io.k8s.api.core.v1.Affinity")] = None
    tolerations: Annotated[list[Toleration] | None, Schema(list_type="atomic", max_items=128)] = (
        None
    )
    volumes: Annotated[
        list[Volume] | None,
        Schema(list_type="map", list_map_keys=("name",), max_items=128, rules=(IMMUTABLE,)),
    ] = None
    init_containers: Annotated[
        list[ContainerPatch] | None,
        Schema(list_type="map", list_map_keys=("name",), max_items=64, rules=(IMMUTABLE,)),
    ] = None
    containers: Annotated[
        list[ContainerPatch] | None,
        Schema(list_type="map", list_map_keys=("name",), max_items=64, rules=(IMMUTABLE,)),
    ] = None
    scheduling_gates: Annotated[
        list[PodSchedulingGate] | None,
        Schema(list_type="map", list_map_keys=("name",), max_items=16),
    ] = None
    image_pull_secrets: Annotated[
        list[LocalObjectReference] | None,
        Schema(list_type="map", list_map_keys=("name",), max_items=64, rules=(IMMUTABLE,)),
    ] = None
    security_context: Annotated[
        dict[str, Any] | None,
        Schema(kube="io.k8s.api.core.v1.PodSecurityContext", rules=(IMMUTABLE,)),
    ] = None
    termination_grace_period_seconds: Annotated[
        Int64 | None, Schema(minimum=0, rules=(IMMUTABLE,))
    ] = None


class PatchMeta(K8sModel):
    """Metadata of a patched template: the five fields of embedded object metadata, as in
    upstream's CRD. Labels and annotations are merged into the built objects; the other three
    are accepted as upstream accepts them."""

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    name: str | None = None
    namespace: str | None = None
    finalizers: list[str] | None = None


class PodTemplateSpecPatch(K8sModel):
    metadata: PatchMeta | None = None
    spec: PodSpecPatch | None = None


class JobSpecPatch(K8sModel):
    template: PodTemplateSpecPatch | None = None


class JobTemplateSpecPatch(K8sModel):
    metadata: PatchMeta | None = None
    spec: JobSpecPatch | None = None


class ReplicatedJobPatch(K8sModel):
    """Changes to one replicated job of the runtime."""

    name: Annotated[str, Schema(min_length=1, max_length=253)]
    """Name of an existing replicated job."""
    template: JobTemplateSpecPatch | None = None


class JobSetSpecPatch(K8sModel):
    replicated_jobs: Annotated[
        list[ReplicatedJobPatch] | None,
        Schema(list_type="map", list_map_keys=("name",), max_items=100),
    ] = None


class JobSetTemplateSpecPatch(K8sModel):
    metadata: PatchMeta | None = None
    spec: JobSetSpecPatch | None = None


class TrainingRuntimeSpecPatch(K8sModel):
    template: JobSetTemplateSpecPatch | None = None


class RuntimePatch(K8sModel):
    """One manager's changes to the runtime, for this TrainJob only."""

    manager: Annotated[str, Schema(min_length=1, max_length=253, rules=(IMMUTABLE,))]
    """Who owns this patch, as a domain-prefixed path (``kueue.x-k8s.io/manager``)."""
    time: Annotated[str | None, Schema(format="date-time")] = None
    """When the patch was last changed (set by the admission webhook)."""
    training_runtime_spec: TrainingRuntimeSpecPatch | None = None


class TrainJobSpec(K8sModel):
    """The desired state of a TrainJob."""

    runtime_ref: Annotated[RuntimeRef, Schema(rules=(IMMUTABLE,))]
    """The runtime to run on."""
    initializer: Annotated[Initializer | None, Schema(rules=(IMMUTABLE,))] = None
    """Dataset and model initialization."""
    trainer: Annotated[Trainer | None, Schema(rules=(IMMUTABLE,))] = None
    """Overrides of the runtime's trainer."""
    runtime_patches: Annotated[
        list[RuntimePatch] | None,
        Schema(list_type="map", list_map_keys=("manager",), max_items=16),
    ] = None
    """Per-manager patches of the runtime (users, Kueue, admission webhooks)."""
    suspend: bool = False
    """Suspend the TrainJob: its pods are stopped and not created."""
    active_deadline_seconds: Annotated[Int64 | None, Schema(minimum=1, rules=(IMMUTABLE,))] = None
    """Fail the TrainJob once it has run this long (the clock restarts on resume)."""
    ttl_seconds_after_finished: Annotated[Int32 | None, Schema(minimum=0)] = None
    """Beyond upstream v2.3, in the shape upstream plans (kubeflow/trainer#4052):
    delete the TrainJob, and so everything it owns, this many seconds after it
    finished (Complete or Failed); 0 deletes it at once. Mutable. Unset: the runtime's
    ``runPolicy.ttlSecondsAfterFinished``, else never (docs/lifecycle.md)."""
    managed_by: Annotated[
        str,
        Schema(
            max_length=253,
            rules=(
                Rule(
                    f"self in ['{c.MANAGED_BY_TRAINER}', '{c.MANAGED_BY_MULTIKUEUE}']",
                    "ManagedBy must be trainer.kubeflow.org/trainjob-controller or "
                    "kueue.x-k8s.io/multikueue if set",
                ),
                IMMUTABLE,
            ),
        ),
    ] = c.MANAGED_BY_TRAINER
    """The controller that reconciles this TrainJob."""


class JobStatus(K8sModel):
    """Counts of the Jobs of one replicated job, copied from the JobSet."""

    name: Annotated[str, Schema(min_length=1, max_length=253)]
    ready: Annotated[Int32, Schema(minimum=0)]
    succeeded: Annotated[Int32, Schema(minimum=0)]
    failed: Annotated[Int32, Schema(minimum=0)]
    active: Annotated[Int32, Schema(minimum=0)]
    suspended: Annotated[Int32, Schema(minimum=0)]


class Metric(K8sModel):
    """A training metric reported by the trainer."""

    name: Annotated[str, Schema(min_length=1, max_length=64)]
    value: Annotated[str, Schema(min_length=1, max_length=64)]


class TrainerStatus(K8sModel):
    """Progress reported by the training code (alpha, feature gate TrainJobStatus)."""

    crd_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.lastUpdatedTime)", "lastUpdatedTime is required when trainerStatus is present"
        ),
    )

    progress_percentage: Annotated[Int32 | None, Schema(minimum=0, maximum=100)] = None
    estimated_remaining_seconds: Annotated[Int32 | None, Schema(minimum=0)] = None
    metrics: Annotated[list[Metric] | None, Schema(list_type="atomic", max_items=256)] = None
    last_updated_time: Annotated[str | None, Schema(format="date-time")] = None


class TrainJobStatus(K8sModel):
    """The observed state of a TrainJob."""

    crd_min_properties: ClassVar[int | None] = 1

    conditions: Annotated[
        list[Condition] | None,
        Schema(list_type="map", list_map_keys=("type",), max_items=8),
    ] = None
    jobs_status: Annotated[
        list[JobStatus] | None,
        Schema(list_type="map", list_map_keys=("name",), max_items=100),
    ] = None
    trainer_status: TrainerStatus | None = None
    start_time: Annotated[str | None, Schema(format="date-time")] = None
    """Beyond upstream v2.3 (planned upstream): when the TrainJob started, that is when it was
    created unsuspended or last resumed (unset while it has never run unsuspended), as a
    Job's ``startTime``; the active deadline counts from it (docs/lifecycle.md)."""
    completion_time: Annotated[str | None, Schema(format="date-time")] = None
    """Beyond upstream v2.3 (planned upstream): when the TrainJob finished, Complete or Failed
    (its terminal condition's time); ``ttlSecondsAfterFinished`` counts from it."""
    state: Annotated[
        str | None,
        Schema(enum=("Pending", "Running", "Suspended", "Complete", "Failed")),
    ] = None
    """Beyond upstream: the TrainJob's current state, derived by the controller from its
    conditions and jobsStatus (shown as STATE by ``kubectl get trainjobs``). A field, not a
    condition, so clients that read conditions (the Kubeflow SDK) see upstream's set."""


class TrainJob(TopLevel):
    """A training job: a runtime plus the user's trainer, initializer and patches."""

    crd_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
            "metadata.name must match RFC 1035 DNS label format",
        ),
        Rule("size(self.metadata.name) <= 63", "metadata.name must be no more than 63 characters"),
    )

    api_version: str = API_VERSION
    kind: str = c.KIND_TRAINJOB
    metadata: ObjectMeta | None = None
    spec: TrainJobSpec | None = None
    status: TrainJobStatus | None = None


# ---------------------------------------------------------------------------------------------
# Runtimes


class EnvInjectionTarget(K8sModel):
    """A container that also receives the torch distributed env (PET_*, MASTER_*)."""

    job_name: Annotated[str, Schema(min_length=1, max_length=253)]
    """Replicated job of the container."""
    container_names: Annotated[
        list[str],
        Schema(
            list_type="set",
            min_items=1,
            max_items=8,
            item_max_length=63,
            rules=(
                Rule(
                    "!self.exists(c, c == 'node')",
                    "containerNames must not include the main node container because PET_* "
                    "envs are always injected into it",
                ),
            ),
        ),
    ]
    """Containers (regular or init) of that job."""


class EnvInjection(K8sModel):
    targets: Annotated[
        list[EnvInjectionTarget] | None,
        Schema(list_type="map", list_map_keys=("jobName",), max_items=16),
    ] = None


class TorchElasticPolicy(K8sModel):
    """Beyond upstream: elastic torchrun. The job starts ``numNodes`` pods and keeps training
    while at least ``minNodes`` of them are up (c10d rendezvous on node 0)."""

    crd_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.minNodes) || !has(self.maxNodes) || self.minNodes <= self.maxNodes",
            "minNodes must be less than or equal to maxNodes",
        ),
    )

    min_nodes: Annotated[Int32 | None, Schema(minimum=1)] = None
    """Fewest nodes training continues with (default: the node count)."""
    max_nodes: Annotated[Int32 | None, Schema(minimum=1)] = None
    """Most nodes that may join the rendezvous (default: the node count)."""
    max_restarts: Annotated[Int32 | None, Schema(minimum=0)] = None
    """How often torchrun restarts the worker group before giving up (PET_MAX_RESTARTS)."""


class TorchMLPolicySource(K8sModel):
    """torchrun: the controller injects PET_* env and the rendezvous port."""

    env_injection: EnvInjection | None = None
    elastic_policy: TorchElasticPolicy | None = None
    """Beyond upstream: elastic training over a node range (PET_NNODES=min:max)."""


class MPIMLPolicySource(K8sModel):
    """MPI (OpenMPI, or MPICH beyond upstream): SSH keys, a hostfile and launcher env."""

    num_proc_per_node: Annotated[
        Int32,
        Schema(rules=(Rule("self >= 1", "NumProcPerNode in mpiPolicy must be >= 1"),)),
    ] = 1
    """Slots per node in the hostfile."""
    mpi_implementation: Annotated[str, Schema(enum=("OpenMPI", "MPICH", ""))] = "OpenMPI"
    """MPI implementation: OpenMPI ("" means OpenMPI too) or MPICH (beyond upstream, whose CRD
    admits only OpenMPI). Intel MPI is not admitted."""
    ssh_auth_mount_path: Annotated[str, Schema(max_length=4096)] = "/root/.ssh"
    """Where the SSH keys are mounted."""
    run_launcher_as_node: bool = False
    """Whether the launcher also runs a training process."""


class JAXMLPolicySource(K8sModel):
    """JAX multi-controller: JAX_* env."""


class XGBoostMLPolicySource(K8sModel):
    """XGBoost collective: DMLC_* env."""


class TensorFlowMLPolicySource(K8sModel):
    """Beyond upstream: TensorFlow multi-worker training. Every pod of the replicated jobs
    ``chief``, ``master``, ``ps``, ``evaluator`` and ``worker`` (and of the trainer step) gets
    ``TF_CONFIG`` with the cluster spec and its own task type and index."""


class PaddleMLPolicySource(K8sModel):
    """Beyond upstream: PaddlePaddle collective training. The trainer step's ``node``
    container gets ``PADDLE_MASTER``, ``PADDLE_NNODES``, ``PADDLE_RANK`` and ``PADDLE_JOB_ID``
    for ``python -m paddle.distributed.launch``."""


class FluxMLPolicySource(K8sModel):
    """Flux framework bootstrap (HPC)."""

    num_proc_per_node: Annotated[
        Int32,
        Schema(rules=(Rule("self >= 1", "NumProcPerNode in fluxPolicy must be >= 1"),)),
    ] = 1


class MLPolicy(K8sModel):
    """The ML framework of the runtime and its node count."""

    crd_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost), "
            "has(self.flux), has(self.tensorflow), has(self.paddle)].filter(x, x).size() <= 1",
            "Only one of the policy can be configured",
        ),
    )

    num_nodes: Int32 | None = None
    """Number of training nodes (1 when unset)."""
    torch: TorchMLPolicySource | None = None
    mpi: MPIMLPolicySource | None = None
    jax: JAXMLPolicySource | None = None
    xgboost: XGBoostMLPolicySource | None = None
    flux: FluxMLPolicySource | None = None
    tensorflow: TensorFlowMLPolicySource | None = None
    """Beyond upstream: TF_CONFIG for TensorFlow distribution strategies."""
    paddle: PaddleMLPolicySource | None = None
    """Beyond upstream: PaddlePaddle collective env."""


class CoschedulingPodGroupPolicySource(K8sModel):
    """Gang scheduling with the scheduler-plugins coscheduling plugin."""

    schedule_timeout_seconds: Int32 = 60


class VolcanoNetworkTopology(K8sModel):
    mode: Annotated[str, Schema(enum=("hard", "soft"))] = "hard"
    highest_tier_allowed: int = 1  # a Go int upstream: no int32 format


class VolcanoPodGroupPolicySource(K8sModel):
    """Gang scheduling with Volcano."""

    network_topology: VolcanoNetworkTopology | None = None


class PodGroupPolicy(K8sModel):
    """Gang scheduling of the TrainJob's pods."""

    coscheduling: CoschedulingPodGroupPolicySource | None = None
    volcano: VolcanoPodGroupPolicySource | None = None


class JobSetTemplateSpec(K8sModel):
    """The JobSet the runtime builds: metadata plus a JobSet spec."""

    crd_min_properties: ClassVar[int | None] = 1

    metadata: ObjectMeta | None = None
    spec: JobSetSpec | None = None


class RunPolicy(K8sModel):
    """Beyond upstream v2.3, in the shape upstream plans (kubeflow/trainer#4052):
    lifecycle defaults for the TrainJobs on a runtime; a TrainJob's own field
    overrides each (docs/lifecycle.md)."""

    active_deadline_seconds: Annotated[Int64 | None, Schema(minimum=1)] = None
    """The default of TrainJob ``spec.activeDeadlineSeconds``."""
    ttl_seconds_after_finished: Annotated[Int32 | None, Schema(minimum=0)] = None
    """The default of TrainJob ``spec.ttlSecondsAfterFinished``."""


class TrainingRuntimeSpec(K8sModel):
    """A runtime blueprint: ML policy, gang scheduling and the JobSet template."""

    crd_min_properties: ClassVar[int | None] = 1

    ml_policy: MLPolicy | None = None
    pod_group_policy: PodGroupPolicy | None = None
    run_policy: RunPolicy | None = None
    """Beyond upstream v2.3: lifecycle defaults for its TrainJobs."""
    template: JobSetTemplateSpec = Field(default_factory=JobSetTemplateSpec)
    """The JobSet template (optional, as upstream: a runtime without one builds a JobSet with
    no replicated jobs)."""


class TrainingRuntime(TopLevel):
    """A runtime usable by TrainJobs in its namespace."""

    api_version: str = API_VERSION
    kind: str = c.KIND_TRAINING_RUNTIME
    metadata: ObjectMeta | None = None
    spec: TrainingRuntimeSpec | None = None


class ClusterTrainingRuntime(TopLevel):
    """A runtime usable by TrainJobs in every namespace."""

    api_version: str = API_VERSION
    kind: str = c.KIND_CLUSTER_TRAINING_RUNTIME
    metadata: ObjectMeta | None = None
    spec: TrainingRuntimeSpec | None = None


AnyRuntime = TrainingRuntime | ClusterTrainingRuntime

# Re-exported for callers that build pods.
__all__ = [
    "ClusterTrainingRuntime",
    "Container",
    "TrainJob",
    "TrainingRuntime",
]
