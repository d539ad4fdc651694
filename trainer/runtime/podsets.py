"""Rules about the build's pod sets that several plugins share, each written once here.

* **How many pods** (``numNodes``): :func:`runtime_count` gives a pod set its count from the
  runtime and :func:`apply_num_nodes` lets the TrainJob's ``trainer.numNodes`` override it
  with the rule of the runtime's ML policy (upstream's plugins:
  https://github.com/kubeflow/trainer/tree/master/pkg/runtime/framework/plugins). Both run
  once, in :func:`trainer.runtime.assemble.new_info`, when the TrainJob is merged onto its
  runtime, like every other TrainJob field that overrides the runtime (``resourcesPerNode``,
  image, command, env). No plugin sets a count from ``numNodes``: they read
  ``PodSet.count``, and admission's validators see the counts the JobSet will get.
* **How many Jobs**: :func:`built_replicas`, the JobSet builder's one replica for the
  initializer and trainer steps, for the plugins that need it before that builder ran.
* **What one node has**: :func:`resources_per_node` (for counting GPUs and CPUs) and
  :func:`trainer_node_container`.

Plugins never import one another (an import-linter contract, docs/design.md): a rule two of
them need lives in ``trainer.runtime``, here or beside the data it reads.
"""

from __future__ import annotations

from trainer.api import constants as c
from trainer.api.v1alpha1 import MLPolicy
from trainer.jobset.types import ReplicatedJob
from trainer.machinery.models.core import Container, ResourceRequirements
from trainer.runtime.info import Info, PodSet

FORCED_SINGLE_REPLICA = (
    c.ANCESTOR_DATASET_INITIALIZER,
    c.ANCESTOR_MODEL_INITIALIZER,
    c.ANCESTOR_TRAINER,
    c.ANCESTOR_CACHE_INITIALIZER,
)
"""The steps the JobSet builder gives ``replicas: 1`` whatever the runtime says."""


def built_replicas(ps: PodSet) -> int:
    """How many Jobs the JobSet makes from ``ps``: 1 for the trainer and initializer steps
    (:data:`FORCED_SINGLE_REPLICA`), else the replicated job's ``replicas``. Plugins that
    build before the JobSet plugin use it so that their output does not depend on the order."""
    return 1 if ps.ancestor in FORCED_SINGLE_REPLICA else ps.replicas


def runtime_count(job: ReplicatedJob, ancestor: str | None, ml_policy: MLPolicy | None) -> int:
    """A pod set's count from the runtime alone: the Job's ``parallelism`` (default 1), but
    ``mlPolicy.numNodes`` (default 1) for the trainer step of a runtime with an ML policy;
    at least 1."""
    job_spec = job.template.spec
    count = (job_spec.parallelism if job_spec else None) or 1
    if ancestor == c.ANCESTOR_TRAINER and ml_policy is not None:
        count = ml_policy.num_nodes if ml_policy.num_nodes is not None else 1
    return max(count, 1)


def apply_num_nodes(info: Info) -> None:
    """The TrainJob's ``trainer.numNodes``, when set, becomes the node count, by the runtime's
    ML policy (the CRD admits at most one policy):

    * MPI: the pod set **named** ``node``, less one with ``runLauncherAsNode`` (the launcher
      is one of the nodes) but at least 1; the launcher keeps its count;
    * Torch: the first trainer-step pod set;
    * JAX, the other policies and none at all: every trainer-step pod set (upstream's PlainML).

    Not clamped: ``numNodes: 0`` gives 0 pods."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    if trainer is None or trainer.num_nodes is None:
        return
    nodes = trainer.num_nodes
    policy = info.ml_policy
    if policy is not None and policy.mpi is not None:
        node = info.pod_set(c.JOB_NODE)
        if node is not None:
            node.count = max(nodes - 1, 1) if policy.mpi.run_launcher_as_node else nodes
    elif policy is not None and policy.torch is not None:
        first = info.trainer_pod_set()
        if first is not None:
            first.count = nodes
    else:
        for ps in info.pod_sets_with_ancestor(c.ANCESTOR_TRAINER):
            ps.count = nodes


def resources_per_node(info: Info, *, skip_undeclared: bool = False) -> ResourceRequirements | None:
    """What one node has, for counting GPUs and CPUs: the TrainJob's ``resourcesPerNode`` when
    set, wholesale (the pod itself gets the merge of both); else the resources of container
    ``node`` in the first job, in template order, that is named ``node`` or has the trainer
    ancestor.

    ``skip_undeclared``: pass over a ``node`` container that declares no resources and keep
    looking. The MPI plugin asks for it because it follows upstream's
    ``ExtractResourcePerNodeFromRuntime``, which does so, and because an MPI runtime has two
    candidates where usually only one declares the GPUs: the ``node`` job that runs the ranks
    and the launcher, which carries the trainer ancestor. Stopping at a
    resource-less candidate there would miss the GPUs and leave one slot per node. Torch,
    TorchTune and XGBoost read the first candidate; every
    shipped runtime of theirs has a single candidate, so the two readings agree on them, and
    their renders stay as they were."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    if trainer is not None and trainer.resources_per_node is not None:
        return trainer.resources_per_node
    for ps in info.pod_sets:
        if ps.name == c.JOB_NODE or ps.ancestor == c.ANCESTOR_TRAINER:
            ctr = ps.container(c.CONTAINER_NODE)
            if ctr is None or (skip_undeclared and ctr.resources is None):
                continue
            return ctr.resources
    return None


def trainer_node_container(info: Info) -> tuple[Container, int] | None:
    """Container ``node`` of the trainer step and the step's pod count, when the TrainJob has
    a ``spec.trainer`` (framework env and ports are injected only then)."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    ps = info.trainer_pod_set()
    if ps is None or trainer is None:
        return None
    node = ps.container(c.CONTAINER_NODE)
    return (node, ps.count) if node is not None else None
