"""The intermediate representation of a build: a TrainJob merged onto its runtime.

:class:`Info` holds a *working copy* of the runtime's JobSet spec, with the TrainJob's
runtimePatches already merged in, and one :class:`PodSet` per replicated job. Plugins mutate
the pod templates of the working copy through their pod sets (env, ports, volumes, commands)
and set pod-set counts; the JobSet builder then turns the working copy into the JobSet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import (
    ClusterTrainingRuntime,
    MLPolicy,
    PodGroupPolicy,
    TrainingRuntime,
    TrainJob,
)
from trainer.jobset import contract as jsc
from trainer.jobset.types import JobSet, JobSetSpec, ReplicatedJob
from trainer.machinery.models.core import Container, JobSpec, PodSpec, PodTemplateSpec
from trainer.machinery.quantity import Quantity
from trainer.runtime.apply import find_container, regular_container
from trainer.runtime.resources import pod_requests

Runtime = TrainingRuntime | ClusterTrainingRuntime


class BuildError(Exception):
    """A TrainJob cannot be built on its runtime; the message says why, for the user."""


@dataclass(frozen=True)
class SSHKeyPair:
    """An SSH key pair as it goes into the MPI Secret."""

    private_pem: bytes
    public_authorized_key: bytes


@dataclass(frozen=True)
class Observed:
    """Objects that already exist in the cluster, passed in so the build stays pure."""

    jobset: JobSet | None = None
    pod_group: Mapping[str, Any] | None = None
    secrets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    config_maps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    limit_ranges: Sequence[Mapping[str, Any]] = ()
    """LimitRanges of the TrainJob's namespace (container defaults count in PodGroups)."""
    runtime_classes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """RuntimeClasses by name (their pod overhead counts in PodGroups)."""
    status_server_secret: Mapping[str, Any] | None = None
    """The webhook certificate Secret of the operator namespace (TrainJobStatus gate): its
    ``ca.crt`` goes into the ``<job>-tls-config`` ConfigMap. None: it does not exist."""
    watched: Mapping[str, Any] = field(default_factory=dict)
    """What each declared watch without an ``into`` field collected, by watch name
    (:mod:`trainer.runtime.watch`)."""


@dataclass(frozen=True)
class BuildContext:
    """What the build may not make up itself: randomness and configuration."""

    ssh_keygen: Callable[[], SSHKeyPair] | None = None
    """Makes a fresh key pair for an MPI job (only called when no Secret exists)."""
    credential_gen: Callable[[], str] | None = None
    """Makes a fresh random credential for a TrainJob's data cache (only called when its
    Secret does not exist: docs/data-cache.md, "Security")."""
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    status_server_url: str | None = None
    """Base URL of the TrainJob status server (TrainJobStatus gate), ``https://host:port``
    with no path; None: upstream's ``https://<webhookService>.<namespace>.svc:10443``."""
    status_server_secret_name: str = c.DEFAULT_WEBHOOK_SECRET_NAME
    """Name of the webhook certificate Secret (error messages, and the watch on it)."""
    status_server_secret_namespace: str = c.DEFAULT_OPERATOR_NAMESPACE
    """Namespace of the webhook certificate Secret (the watch on it)."""
    objects: bool = True
    """False: builders still make every change to the Info and raise every error, but may
    return no objects. Admission renders only to check the JobSet spec (names, build errors)
    and so skips serialising what the controller would apply."""


@dataclass
class PodSet:
    """The pods of one replicated job: how many, and their template (a live reference into
    the working JobSet spec)."""

    name: str
    ancestor: str | None
    count: int
    job: ReplicatedJob

    @property
    def replicas(self) -> int:
        return self.job.replicas

    @property
    def pod_spec(self) -> PodSpec:
        tmpl = self.job.template
        if tmpl.spec is None:
            tmpl.spec = JobSpec(template=PodTemplateSpec())
        if tmpl.spec.template.spec is None:
            tmpl.spec.template.spec = PodSpec()
        return tmpl.spec.template.spec

    def container(self, name: str) -> Container | None:
        """The regular container ``name``."""
        return regular_container(self.pod_spec, name)

    def any_container(self, name: str) -> Container | None:
        """The regular container ``name``, else the init container of that name."""
        return find_container(self.pod_spec, name)

    def endpoints(self, jobset_name: str, subdomain: str) -> list[str]:
        """Pod DNS names, ``<jobset>-<rjob>-<replica>-<pod>.<subdomain>``, replica-major."""
        return jsc.pod_dns_names(jobset_name, self.name, self.replicas, self.count, subdomain)

    def single_pod_requests(self) -> dict[str, Quantity]:
        return pod_requests(self.pod_spec)


@dataclass
class Info:
    """A TrainJob merged onto its runtime, as the plugins see and change it."""

    trainjob: TrainJob
    runtime: Runtime
    ml_policy: MLPolicy | None
    pod_group_policy: PodGroupPolicy | None
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: JobSetSpec
    pod_sets: list[PodSet]
    observed: Observed
    pod_labels: dict[str, str] = field(default_factory=dict)
    pod_annotations: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        meta = self.trainjob.metadata
        return (meta.name if meta else None) or ""

    @property
    def namespace(self) -> str:
        meta = self.trainjob.metadata
        return (meta.namespace if meta else None) or "default"

    @property
    def subdomain(self) -> str:
        network = self.spec.network
        return jsc.subdomain(self.name, network.subdomain if network else None)

    def pod_set(self, name: str) -> PodSet | None:
        for ps in self.pod_sets:
            if ps.name == name:
                return ps
        return None

    def pod_sets_with_ancestor(self, ancestor: str) -> list[PodSet]:
        return [ps for ps in self.pod_sets if ps.ancestor == ancestor]

    def trainer_pod_set(self) -> PodSet | None:
        found = self.pod_sets_with_ancestor(c.ANCESTOR_TRAINER)
        return found[0] if found else None

    def first_endpoint(self, job: str = c.JOB_NODE) -> str:
        """``<job>-node-0-0.<job>``: the address upstream hard-codes for rendezvous (it ignores
        ``network.subdomain`` and the trainer job's real name)."""
        return jsc.pod_dns_name(self.name, job, 0, 0, self.name)
