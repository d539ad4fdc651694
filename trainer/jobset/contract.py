"""The JobSet contract, in one place: the names JobSet gives the Jobs and pods it makes, their
DNS names, the labels and annotations it sets, the fields that stay mutable while it is
suspended, and its condition types and reasons. (How its children point at it is generic: a
controller reference, :mod:`trainer.machinery.owners`.)

Everyone who makes a JobSet or reads one agrees through this module: the build (pod endpoints,
name budgets), the controller (status, updates it may send), the local plane's JobSet controller
and kubelet, ``trainer convert``, the data-cache plugin, the dashboard and the CLI. Upstream
spells these in ``api/jobset/v1alpha2/jobset_types.go`` and ``pkg/controllers``
(https://github.com/kubernetes-sigs/jobset/tree/v0.12.0).

The fields that stay mutable while suspended: JobSet's validating webhook makes
``spec.replicatedJobs`` immutable, except that while the old or the new object is suspended each
pod template's labels, annotations, nodeSelector, tolerations and schedulingGates may change:
the fields a queueing system (Kueue) sets when it admits a workload onto a flavor (upstream:
``jobset_webhook.go`` ``ValidateUpdate``,
https://github.com/kubernetes-sigs/jobset/blob/main/pkg/webhooks/jobset_webhook.go). The local
API server enforces the rule as JobSet's webhook would, and the controller uses it to tell an
update JobSet will accept from one that needs the JobSet recreated.
:func:`mask_pod_templates` removes those fields, so two lists of replicated jobs that differ only
in them compare equal.
"""

from __future__ import annotations

from typing import Any, Final

# It imports nothing (pydantic included): the dashboard, which stays lean, reads it too.
GROUP: Final = "jobset.x-k8s.io"
VERSION: Final = "v1alpha2"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "JobSet"
PLURAL: Final = "jobsets"

# --- Labels and annotations JobSet sets on its Jobs and their pods ----------------------------
PREFIX: Final = "jobset.sigs.k8s.io/"
LABEL_JOBSET_NAME: Final = PREFIX + "jobset-name"
LABEL_JOBSET_UID: Final = PREFIX + "jobset-uid"
LABEL_REPLICATED_JOB: Final = PREFIX + "replicatedjob-name"
LABEL_REPLICATED_JOB_REPLICAS: Final = PREFIX + "replicatedjob-replicas"
LABEL_GLOBAL_REPLICAS: Final = PREFIX + "global-replicas"
LABEL_RESTART_ATTEMPT: Final = PREFIX + "restart-attempt"
LABEL_JOB_INDEX: Final = PREFIX + "job-index"
LABEL_JOB_GLOBAL_INDEX: Final = PREFIX + "job-global-index"
LABEL_JOB_KEY: Final = PREFIX + "job-key"
LABEL_GROUP_NAME: Final = PREFIX + "group-name"
LABEL_GROUP_REPLICAS: Final = PREFIX + "group-replicas"
LABEL_JOB_GROUP_INDEX: Final = PREFIX + "job-group-index"
MANAGED_BY_JOBSET: Final = PREFIX + "jobset-controller"
"""``spec.managedBy`` of a JobSet JobSet's own controller reconciles (also the unset value)."""
CONTROLLER_NAME: Final = "jobset-controller"
"""The field manager and Event source of JobSet's controller."""

# --- Condition types and reasons of a JobSet's status ---------------------------------------
COMPLETED: Final = "Completed"
FAILED: Final = "Failed"
SUSPENDED: Final = "Suspended"
STARTUP_POLICY_COMPLETED: Final = "StartupPolicyCompleted"
REASON_ALL_JOBS_COMPLETED: Final = "AllJobsCompleted"
REASON_FAILED_JOBS: Final = "FailedJobs"
REASON_REACHED_MAX_RESTARTS: Final = "ReachedMaxRestarts"
REASON_SUSPENDED: Final = "SuspendedJobs"
REASON_RESUMED: Final = "ResumeJobs"

# --- Failure policy -------------------------------------------------------------------------
FAILURE_ACTIONS: Final = (
    "FailJobSet",
    "RestartJobSet",
    "RestartJobSetAndIgnoreMaxRestarts",
    "RestartJob",
    "RestartJobAndIgnoreMaxRestarts",
)
"""The actions a ``failurePolicy`` rule may take."""
RESTART_JOB_ACTIONS: Final = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")
"""The actions behind JobSet's ``RestartJob`` feature gate (off by default in v0.12.0)."""
JOB_FAILURE_REASONS: Final = (
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "FailedIndexes",
    "MaxFailedIndexesExceeded",
    "PodFailurePolicy",
)
"""The Job failure reasons a ``failurePolicy`` rule may match (``onJobFailureReasons``)."""


# --- Names ----------------------------------------------------------------------------------
def job_name(jobset: str, replicated_job: str, index: int) -> str:
    """The name of Job ``index`` of a replicated job: ``<jobset>-<rjob>-<index>``."""
    return f"{jobset}-{replicated_job}-{index}"


def pod_hostname(jobset: str, replicated_job: str, job_index: int, pod_index: int) -> str:
    """The hostname of pod ``pod_index`` of that Job (an Indexed Job's pods are
    ``<job>-<completion index>``)."""
    return f"{job_name(jobset, replicated_job, job_index)}-{pod_index}"


def subdomain(jobset: str, network_subdomain: str | None = None) -> str:
    """The headless Service (and pod subdomain) of a JobSet: ``spec.network.subdomain``, else
    the JobSet's name."""
    return network_subdomain or jobset


def pod_dns_name(jobset: str, replicated_job: str, job_index: int, pod_index: int, sub: str) -> str:
    """A pod's DNS name in its namespace: ``<jobset>-<rjob>-<job>-<pod>.<subdomain>``."""
    return f"{pod_hostname(jobset, replicated_job, job_index, pod_index)}.{sub}"


def pod_dns_names(jobset: str, replicated_job: str, jobs: int, pods: int, sub: str) -> list[str]:
    """:func:`pod_dns_name` of every pod of a replicated job's ``jobs`` Jobs of ``pods`` pods
    each, Job-major. One call per replicated job, with each Job's name made once: a 10,000-node
    render asks for 10,000 names (hack/bench/render.py). Each is ``pod_hostname`` + ``.sub``."""
    prefixes = [job_name(jobset, replicated_job, index) for index in range(jobs)]
    return [f"{prefix}-{pod}.{sub}" for prefix in prefixes for pod in range(pods)]


def claim_name(claim: str, jobset: str) -> str:
    """The PersistentVolumeClaim JobSet makes from a ``volumeClaimPolicies`` template named
    ``claim``: ``<claim>-<jobset>``."""
    return f"{claim}-{jobset}"


# --- Fields mutable while suspended ---------------------------------------------------------
MUTABLE_POD_METADATA: Final = ("labels", "annotations")
"""Pod-template ``metadata`` fields that may change while suspended."""

MUTABLE_POD_SPEC: Final = ("nodeSelector", "tolerations", "schedulingGates")
"""Pod-template ``spec`` fields that may change while suspended."""


def mask_pod_templates(replicated_jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``replicated_jobs`` (wire data) without the fields that stay mutable while suspended.

    The input is not modified; every map on the path to a pod template is copied."""
    out = []
    for original in replicated_jobs:
        job = dict(original)
        tmpl = dict(job.get("template") or {})
        jspec = dict(tmpl.get("spec") or {})
        pod = dict(jspec.get("template") or {})
        pod["metadata"] = {
            k: v for k, v in (pod.get("metadata") or {}).items() if k not in MUTABLE_POD_METADATA
        }
        pod["spec"] = {
            k: v for k, v in (pod.get("spec") or {}).items() if k not in MUTABLE_POD_SPEC
        }
        jspec["template"] = pod
        tmpl["spec"] = jspec
        job["template"] = tmpl
        out.append(job)
    return out
