"""Every wire-level name of the Trainer contract in one place: API identity, labels,
annotations, condition types and reasons, env names, container, job and object names.

JobSet's names (its API identity, labels, condition types and reasons) are JobSet's contract,
not the Trainer's: they live in :mod:`trainer.jobset.contract`. Like that module, this one
imports nothing else (pydantic included), so the dashboard can read it."""

from __future__ import annotations

from trainer.jobset import contract as jsc

# --- API identity ---------------------------------------------------------------------------
TRAINER_RELEASE = "2.3.0"
"""The Kubeflow Trainer release whose API this project serves."""
PUBLIC_CONFIG_MAP = "kubeflow-trainer-public"
"""The ConfigMap in the install namespace that tells clients (the Kubeflow SDK) the control
plane's version, under ``PUBLIC_VERSION_KEY``, as upstream's install ships it."""
PUBLIC_VERSION_KEY = "kubeflow_trainer_version"

GROUP = "trainer.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND_TRAINJOB = "TrainJob"
KIND_TRAINING_RUNTIME = "TrainingRuntime"
KIND_CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
PLURAL_TRAINJOBS = "trainjobs"
PLURAL_TRAINING_RUNTIMES = "trainingruntimes"
PLURAL_CLUSTER_TRAINING_RUNTIMES = "clustertrainingruntimes"

# Registry keys `<Kind>.<group>` used to look runtimes up.
RUNTIME_KEY_CLUSTER = f"{KIND_CLUSTER_TRAINING_RUNTIME}.{GROUP}"
RUNTIME_KEY_NAMESPACED = f"{KIND_TRAINING_RUNTIME}.{GROUP}"

# PodGroups of the gang schedulers (scheduler-plugins coscheduling and Volcano).
COSCHEDULING_API_VERSION = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_API_VERSION = "scheduling.volcano.sh/v1beta1"
KIND_POD_GROUP = "PodGroup"

# --- managedBy ------------------------------------------------------------------------------
MANAGED_BY_TRAINER = "trainer.kubeflow.org/trainjob-controller"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"

# --- Field managers -------------------------------------------------------------------------
FIELD_MANAGER = "trainer"
FIELD_MANAGER_STATUS_SERVER = "trainer-status"
KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"

# --- Labels and annotations -----------------------------------------------------------------
LABEL_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
LABEL_SUPPORT = "trainer.kubeflow.org/support"
SUPPORT_DEPRECATED = "deprecated"
LABEL_WEBHOOK_VALIDATION = "trainer.kubeflow.org/webhook-validation"
WEBHOOK_VALIDATION_DISABLED = "disabled"
LABEL_FRAMEWORK = "trainer.kubeflow.org/framework"
# On the side objects this controller makes (snapshot, MPI and Flux objects): lets the
# controller watch only its own ConfigMaps and Secrets, and users find them.
LABEL_TRAINJOB_NAME = "trainer.kubeflow.org/trainjob-name"
LABEL_MANAGED_BY_INSTALLER = "trainer.kubeflow.org/managed-by"
# On runtimes written by `trainer convert`: the v1 apiVersion/kind they were converted from.
ANNOTATION_CONVERTED_FROM = "trainer.kubeflow.org/converted-from"
FINALIZER_RESOURCE_IN_USE = "trainer.kubeflow.org/resource-in-use"  # legacy: only removed

ANNOTATION_JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
FIELD_PATH_COMPLETION_INDEX = f"metadata.annotations['{ANNOTATION_JOB_COMPLETION_INDEX}']"

# The downward-API path of a pod's Job index within its replicated job (JobSet's label).
FIELD_PATH_JOB_INDEX = f"metadata.labels['{jsc.LABEL_JOB_INDEX}']"
LABEL_COSCHEDULING_POD_GROUP = "scheduling.x-k8s.io/pod-group"
ANNOTATION_VOLCANO_GROUP_NAME = "scheduling.k8s.io/group-name"
ANNOTATION_VOLCANO_QUEUE = "scheduling.volcano.sh/queue-name"
LABEL_KUEUE_QUEUE_NAME = "kueue.x-k8s.io/queue-name"
LABEL_KUEUE_PODSET = "kueue.x-k8s.io/podset"

# Ancestor-step values.
ANCESTOR_DATASET_INITIALIZER = "dataset-initializer"
ANCESTOR_MODEL_INITIALIZER = "model-initializer"
ANCESTOR_TRAINER = "trainer"
ANCESTOR_CACHE_INITIALIZER = "cache-initializer"  # this project's data cache
ANCESTORS = (
    ANCESTOR_DATASET_INITIALIZER,
    ANCESTOR_MODEL_INITIALIZER,
    ANCESTOR_TRAINER,
    ANCESTOR_CACHE_INITIALIZER,
)

# --- Containers, jobs, volumes, ports -------------------------------------------------------
CONTAINER_NODE = "node"
CONTAINER_DATASET_INITIALIZER = "dataset-initializer"
CONTAINER_MODEL_INITIALIZER = "model-initializer"
CONTAINER_CACHE_INITIALIZER = "cache-initializer"
CONTAINER_FLUX_INSTALLER = "flux-installer"
ANCESTOR_CONTAINER = {
    ANCESTOR_TRAINER: CONTAINER_NODE,
    ANCESTOR_DATASET_INITIALIZER: CONTAINER_DATASET_INITIALIZER,
    ANCESTOR_MODEL_INITIALIZER: CONTAINER_MODEL_INITIALIZER,
    ANCESTOR_CACHE_INITIALIZER: CONTAINER_CACHE_INITIALIZER,
}

JOB_NODE = "node"
JOB_LAUNCHER = "launcher"
JOB_DATASET_INITIALIZER = "dataset-initializer"
JOB_MODEL_INITIALIZER = "model-initializer"
JOB_CACHE_INITIALIZER = "cache-initializer"

VOLUME_INITIALIZER = "initializer"
DATASET_MOUNT_PATH = "/workspace/dataset"
MODEL_MOUNT_PATH = "/workspace/model"

CONTAINER_TRAINER_PORT = 29500
DATA_CACHE_PORT = 50051

# --- Env names ------------------------------------------------------------------------------
ENV_STORAGE_URI = "STORAGE_URI"

ENV_PET_NNODES = "PET_NNODES"
ENV_PET_NPROC_PER_NODE = "PET_NPROC_PER_NODE"
ENV_PET_NODE_RANK = "PET_NODE_RANK"
ENV_PET_MASTER_ADDR = "PET_MASTER_ADDR"
ENV_PET_MASTER_PORT = "PET_MASTER_PORT"
TORCH_RESERVED_ENVS = (
    ENV_PET_NNODES,
    ENV_PET_NPROC_PER_NODE,
    ENV_PET_NODE_RANK,
    ENV_PET_MASTER_ADDR,
    ENV_PET_MASTER_PORT,
)
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"

# Beyond upstream: elastic torchrun (mlPolicy.torch.elasticPolicy).
ENV_PET_RDZV_BACKEND = "PET_RDZV_BACKEND"
ENV_PET_RDZV_ENDPOINT = "PET_RDZV_ENDPOINT"
ENV_PET_MAX_RESTARTS = "PET_MAX_RESTARTS"
TORCH_ELASTIC_RESERVED_ENVS = (ENV_PET_RDZV_BACKEND, ENV_PET_RDZV_ENDPOINT, ENV_PET_MAX_RESTARTS)
RDZV_BACKEND_C10D = "c10d"

ENV_OMPI_HOSTFILE = "OMPI_MCA_orte_default_hostfile"
ENV_OMPI_KEEP_FQDN = "OMPI_MCA_orte_keep_fqdn_hostnames"
ENV_OMPI_DEFAULT_SLOTS = "OMPI_MCA_orte_set_default_slots"
ENV_OMPI_RSH_ARGS = "OMPI_MCA_plm_rsh_args"
MPI_RESERVED_ENVS = (
    ENV_OMPI_HOSTFILE,
    ENV_OMPI_RSH_ARGS,
    ENV_OMPI_KEEP_FQDN,
    ENV_OMPI_DEFAULT_SLOTS,
)

ENV_JAX_NUM_PROCESSES = "JAX_NUM_PROCESSES"
ENV_JAX_PROCESS_ID = "JAX_PROCESS_ID"
ENV_JAX_COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"

ENV_DMLC_TRACKER_URI = "DMLC_TRACKER_URI"
ENV_DMLC_TRACKER_PORT = "DMLC_TRACKER_PORT"
ENV_DMLC_TASK_ID = "DMLC_TASK_ID"
ENV_DMLC_NUM_WORKER = "DMLC_NUM_WORKER"
XGBOOST_RESERVED_ENVS = (
    ENV_DMLC_TRACKER_URI,
    ENV_DMLC_TRACKER_PORT,
    ENV_DMLC_TASK_ID,
    ENV_DMLC_NUM_WORKER,
)

# Beyond upstream: TensorFlow (mlPolicy.tensorflow). TF_TASK_INDEX holds the pod's index within
# its role; TF_CONFIG refers to it as $(TF_TASK_INDEX), expanded by the kubelet.
ENV_TF_CONFIG = "TF_CONFIG"
ENV_TF_TASK_INDEX = "TF_TASK_INDEX"
TENSORFLOW_RESERVED_ENVS = (ENV_TF_CONFIG, ENV_TF_TASK_INDEX)
TF_ROLE_CHIEF = "chief"
TF_ROLE_MASTER = "master"
TF_ROLE_WORKER = "worker"
TF_ROLE_PS = "ps"
TF_ROLE_EVALUATOR = "evaluator"

# Beyond upstream: PaddlePaddle collective (mlPolicy.paddle), read by paddle.distributed.launch.
ENV_PADDLE_MASTER = "PADDLE_MASTER"
ENV_PADDLE_NNODES = "PADDLE_NNODES"
ENV_PADDLE_RANK = "PADDLE_RANK"
ENV_PADDLE_JOB_ID = "PADDLE_JOB_ID"
PADDLE_RESERVED_ENVS = (ENV_PADDLE_MASTER, ENV_PADDLE_NNODES, ENV_PADDLE_RANK, ENV_PADDLE_JOB_ID)

ENV_DATA_CACHE_ENDPOINT = "DATA_CACHE_ENDPOINT"
ENV_DATA_CACHE_PEERS = "DATA_CACHE_PEERS"  # every cache pod's host:port (docs/data-cache.md)
ENV_DATA_CACHE_CREDENTIAL_FILE = "DATA_CACHE_CREDENTIAL_FILE"  # docs/data-cache.md, "Security"

ENV_STATUS_SERVER_URL = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_STATUS_SERVER_CA_CERT = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
ENV_STATUS_SERVER_TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"

# --- TrainJobStatus (status server) ---------------------------------------------------------
FEATURE_TRAINJOB_STATUS = "TrainJobStatus"
STATUS_SERVER_VOLUME = "kubeflow-trainer-token"
STATUS_SERVER_MOUNT_PATH = "/var/run/secrets/kubeflow/trainer"
STATUS_SERVER_CA_KEY = "ca.crt"
STATUS_SERVER_TOKEN_PATH = "token"
STATUS_SERVER_TOKEN_EXPIRATION_SECONDS = 3600
DEFAULT_WEBHOOK_SERVICE_NAME = "kubeflow-trainer-controller-manager"
DEFAULT_WEBHOOK_SECRET_NAME = "kubeflow-trainer-webhook-cert"
DEFAULT_OPERATOR_NAMESPACE = "kubeflow-system"
DEFAULT_STATUS_SERVER_PORT = 10443

# --- Side objects ---------------------------------------------------------------------------
RUNTIME_SNAPSHOT_SUFFIX = "-runtime-snapshot"
RUNTIME_SNAPSHOT_KEY = "runtime"
MPI_SSH_AUTH_SUFFIX = "-mpi-ssh-auth"
MPI_HOSTFILE_SUFFIX = "-mpi-hostfile"
DATA_CACHE_AUTH_SUFFIX = "-data-cache-auth"
FLUX_ENTRYPOINT_SUFFIX = "-flux-entrypoint"
FLUX_CURVE_SUFFIX = "-flux-curve"
TLS_CONFIG_SUFFIX = "-tls-config"

# --- Conditions -----------------------------------------------------------------------------
COND_SUSPENDED = "Suspended"
COND_COMPLETE = "Complete"
COND_FAILED = "Failed"

REASON_SUSPENDED = "Suspended"
REASON_RESUMED = "Resumed"
REASON_RUNTIME_NOT_SUPPORTED = "TrainingRuntimeNotSupported"
REASON_DEADLINE_EXCEEDED = "DeadlineExceeded"

MSG_SUSPENDED = "TrainJob is suspended"
MSG_RESUMED = "TrainJob is resumed"
MSG_DEADLINE_EXCEEDED = "TrainJob exceeded its active deadline"

# Beyond upstream: a TrainJob whose objects cannot be built or applied says so in this
# condition (docs/design.md, "One reconcile"; trainer.controller.status).
COND_BUILD_FAILED = "BuildFailed"

# --- Events ---------------------------------------------------------------------------------
EVENT_RESOURCES_CREATION_FAILED = "TrainJobResourcesCreationFailed"
EVENT_ACTION_RECONCILING = "Reconciling"

# --- Runtime deprecation --------------------------------------------------------------------
RUNTIME_DEPRECATION_POLICY_URL = (
    "https://trainer.kubeflow.org/en/latest/operator-guides/runtime.html#runtime-deprecation-policy"
)
