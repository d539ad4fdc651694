"""JobSet ``jobset.x-k8s.io/v1alpha2``: the types the Trainer builds and reads.

The schema is JobSet v0.12.0's CRD (checked node by node in tests/deploy/test_crd_parity.py).
Defaults are the CRD's own (``replicas: 1``, ``groupName: default``,
``failurePolicy.restartStrategy: Recreate``, ``retentionPolicy.whenDeleted: Delete``); the
ones JobSet's mutating webhook applies on create (successPolicy All, startupPolicy AnyOrder,
Indexed completion, network DNS hostnames) are not CRD defaults and are not applied here.
What JobSet checks in its validating webhook rather than its CRD (failure-policy rule names,
job failure reasons, ``managedBy`` and ``groupName`` lengths) is checked by the local plane's
JobSet webhook (``trainer/jobset/webhook.py``).
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from trainer.jobset.contract import API_VERSION, FAILURE_ACTIONS, KIND
from trainer.machinery.models.base import K8sModel, Rule, Schema, TopLevel
from trainer.machinery.models.core import (
    Condition,
    Int32,
    JobTemplateSpec,
    ObjectMeta,
    PersistentVolumeClaimTemplate,
)


class DependsOn(K8sModel):
    """Start this replicated job only once another one reached a status."""

    name: Annotated[str, Schema(required=True)]
    """Name of an earlier replicated job."""
    status: Annotated[str, Schema(required=True, enum=("Ready", "Complete"))]
    """``Ready``: every Job of the dependency is ready or finished; ``Complete``: all succeeded."""


class ReplicatedJob(K8sModel):
    """A Job template and how many Jobs to make from it."""

    name: Annotated[str, Schema(required=True)]
    """Name of the replicated job; the suffix of its Jobs' names."""
    group_name: str = "default"
    """Group of replicated jobs, used for group-index labels."""
    template: Annotated[JobTemplateSpec, Schema(required=True)]
    """The Job template."""
    replicas: Int32 = 1
    """Number of Jobs made from the template."""
    depends_on: Annotated[
        list[DependsOn] | None,
        Schema(
            max_items=5,
            list_type="map",
            list_map_keys=("name",),
            rules=(Rule("self == oldSelf", "Value is immutable"),),
        ),
    ] = None
    """Replicated jobs that must reach a status before this one starts."""


class Network(K8sModel):
    """Pod DNS for the JobSet."""

    enable_dns_hostnames: Annotated[bool | None, Field(alias="enableDNSHostnames")] = None
    """Give pods stable DNS hostnames (JobSet's webhook defaults this to true)."""
    subdomain: str | None = None
    """Subdomain and headless Service name; the JobSet name when unset."""
    publish_not_ready_addresses: bool | None = None
    """Publish DNS records of pods that are not ready (JobSet's webhook defaults to true)."""


class SuccessPolicy(K8sModel):
    """When the JobSet counts as Completed."""

    operator: Annotated[str, Schema(required=True, enum=("All", "Any"))]
    """``All``: every Job of the targets succeeded; ``Any``: one did."""
    target_replicated_jobs: Annotated[list[str] | None, Schema(list_type="atomic")] = None
    """Replicated jobs the operator applies to; all when empty."""


class FailurePolicyRule(K8sModel):
    """What to do when a child Job fails in a given way."""

    name: Annotated[str, Schema(required=True)]
    """Name of the rule (JobSet's webhook checks its length and characters)."""
    action: Annotated[str, Schema(required=True, enum=FAILURE_ACTIONS)]
    on_job_failure_reasons: list[str] | None = None
    """Job failure reasons the rule matches, from ``JOB_FAILURE_REASONS`` (checked by the
    webhook)."""
    on_job_failure_message_patterns: list[str] | None = None
    target_replicated_jobs: Annotated[list[str] | None, Schema(list_type="atomic")] = None


class FailurePolicy(K8sModel):
    """Restart and failure behaviour of the JobSet."""

    max_restarts: Int32 | None = None
    """How many times the whole JobSet may be recreated before it fails."""
    restart_strategy: Annotated[
        str, Schema(enum=("Recreate", "BlockingRecreate", "InPlaceRestart"))
    ] = "Recreate"
    rules: list[FailurePolicyRule] | None = None


class StartupPolicy(K8sModel):
    """Deprecated start order of replicated jobs (use dependsOn)."""

    startup_policy_order: Annotated[str, Schema(required=True, enum=("AnyOrder", "InOrder"))]


class Coordinator(K8sModel):
    """The pod published as the JobSet's coordinator."""

    replicated_job: Annotated[str, Schema(required=True)]
    job_index: int | None = None  # Go ints upstream: no int32 format
    pod_index: int | None = None


class RetentionPolicy(K8sModel):
    """What happens to volume claims when the JobSet is deleted."""

    when_deleted: Annotated[str, Schema(enum=("Delete", "Retain"))] = "Delete"


class VolumeClaimPolicy(K8sModel):
    """PersistentVolumeClaims shared by the JobSet's pods."""

    crd_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)",
            "namespace cannot be set for VolumeClaimPolicies templates",
        ),
    )

    templates: Annotated[
        list[PersistentVolumeClaimTemplate] | None, Schema(list_type="atomic", max_items=50)
    ] = None
    retention_policy: RetentionPolicy | None = None


STARTUP_DEPENDS_ON_RULE = Rule(
    "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
    "self.replicatedJobs.exists(x, has(x.dependsOn)))",
    "StartupPolicy and DependsOn APIs are mutually exclusive",
)


class JobSetSpec(K8sModel):
    """The desired state of a JobSet."""

    crd_rules: ClassVar[tuple[Rule, ...]] = (STARTUP_DEPENDS_ON_RULE,)

    replicated_jobs: Annotated[
        list[ReplicatedJob] | None, Schema(list_type="map", list_map_keys=("name",))
    ] = None
    """The Job templates of the JobSet."""
    network: Annotated[
        Network | None, Schema(rules=(Rule("self == oldSelf", "Value is immutable"),))
    ] = None
    success_policy: Annotated[
        SuccessPolicy | None, Schema(rules=(Rule("self == oldSelf", "Value is immutable"),))
    ] = None
    failure_policy: Annotated[
        FailurePolicy | None, Schema(rules=(Rule("self == oldSelf", "Value is immutable"),))
    ] = None
    startup_policy: Annotated[
        StartupPolicy | None, Schema(rules=(Rule("self == oldSelf", "Value is immutable"),))
    ] = None
    suspend: bool | None = None
    """Suspend every child Job."""
    coordinator: Coordinator | None = None
    managed_by: str | None = None
    """The controller that manages this JobSet; others skip it."""
    ttl_seconds_after_finished: Annotated[Int32 | None, Schema(minimum=0)] = None
    """Delete the JobSet this many seconds after it finished."""
    volume_claim_policies: Annotated[
        list[VolumeClaimPolicy] | None,
        Schema(
            max_items=50,
            list_type="atomic",
            rules=(Rule("self == oldSelf", "Value is immutable"),),
        ),
    ] = None


class ReplicatedJobStatus(K8sModel):
    """Counts of the Jobs of one replicated job (Jobs, not pods)."""

    name: Annotated[str, Schema(required=True)]
    ready: Annotated[Int32, Schema(required=True)]
    succeeded: Annotated[Int32, Schema(required=True)]
    failed: Annotated[Int32, Schema(required=True)]
    active: Annotated[Int32, Schema(required=True)]
    suspended: Annotated[Int32, Schema(required=True)]
    job_restarts: Annotated[list[Int32] | None, Schema(list_type="atomic", max_items=1024)] = None
    """In-place restarts of each Job, by Job index (restartStrategy InPlaceRestart)."""
    job_restarts_count_towards_max: Annotated[
        list[Int32] | None, Schema(list_type="atomic", max_items=1024)
    ] = None
    """The restarts of each Job that count towards a rule's maxRestarts."""


class JobSetStatus(K8sModel):
    """The observed state of a JobSet."""

    conditions: Annotated[
        list[Condition] | None, Schema(list_type="map", list_map_keys=("type",))
    ] = None
    restarts: Int32 | None = None
    restarts_count_towards_max: Int32 | None = None
    current_in_place_restart_attempt: Annotated[Int32 | None, Schema(minimum=0)] = None
    """The in-place restart attempt the JobSet is on (restartStrategy InPlaceRestart)."""
    previous_in_place_restart_attempt: Annotated[Int32 | None, Schema(minimum=0)] = None
    """The in-place restart attempt before the current one."""
    terminal_state: str | None = None
    replicated_jobs_status: Annotated[
        list[ReplicatedJobStatus] | None, Schema(list_type="map", list_map_keys=("name",))
    ] = None


class JobSet(TopLevel):
    """A set of Jobs run and restarted together."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: ObjectMeta | None = None
    spec: JobSetSpec | None = None
    status: JobSetStatus | None = None
