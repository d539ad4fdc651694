"""The core Kubernetes types an API embeds (the Trainer's and JobSet's do).

Only the part their controllers read or write is modelled; everything else on these objects
(probes, affinity, security contexts, every volume source, future fields) is kept verbatim as
an extra field and survives a load/dump round trip. The generated CRDs do not follow these
models: each class names its Kubernetes type (``kube_definition``) and the CRD gets that type's
full schema (:mod:`trainer.machinery.kubeschema`), so the API server types, prunes and merges every
field as with upstream's CRDs.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field

from trainer.machinery.kubeschema import QUANTITY_PATTERN
from trainer.machinery.models.base import K8sModel, Schema

Quantity = Annotated[int | float | str, Schema(int_or_string=True, pattern=QUANTITY_PATTERN)]
"""A resource quantity (``"500m"``, ``2``, ``"4Gi"``), kept exactly as written."""

IntOrString = Annotated[int | str, Schema(int_or_string=True)]

Int32 = Annotated[int, Schema(format="int32")]
Int64 = Annotated[int, Schema(format="int64")]

StringMap = dict[str, str]

# The DNS-1123 label used for names of containers, volumes and ports.
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class OwnerReference(K8sModel):
    """A reference to the owner of an object."""

    api_version: Annotated[str, Schema(required=True)]
    kind: Annotated[str, Schema(required=True)]
    name: Annotated[str, Schema(required=True)]
    uid: Annotated[str, Schema(required=True)]
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(K8sModel):
    """Standard object metadata. At the root of an object the CRD states only ``type: object``
    (the API server owns its schema); embedded in a template it has the five fields that
    controller-gen emits for embedded metadata."""

    crd_preserve_unknown: ClassVar[bool] = True

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: Int64 | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: Int64 | None = None
    labels: StringMap | None = None
    annotations: StringMap | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None
    managed_fields: list[dict[str, Any]] | None = None


class ObjectFieldSelector(K8sModel):
    """Selects a field of the pod (``metadata.annotations['...']``)."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.ObjectFieldSelector"

    api_version: str | None = None
    field_path: Annotated[str, Schema(required=True)]


class KeySelector(K8sModel):
    """Selects a key of a ConfigMap or Secret."""

    crd_preserve_unknown: ClassVar[bool] = True

    name: str | None = None
    key: Annotated[str, Schema(required=True)]
    optional: bool | None = None


class EnvVarSource(K8sModel):
    """Where an environment variable's value comes from."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.EnvVarSource"

    field_ref: ObjectFieldSelector | None = None
    config_map_key_ref: KeySelector | None = None
    secret_key_ref: KeySelector | None = None
    resource_field_ref: dict[str, Any] | None = None


class EnvVar(K8sModel):
    """An environment variable of a container."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.EnvVar"

    name: Annotated[str, Schema(required=True)]
    value: str | None = None
    value_from: EnvVarSource | None = None


class LocalObjectReference(K8sModel):
    """A reference to an object in the same namespace, by name."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.LocalObjectReference"

    name: str = ""


class EnvFromSource(K8sModel):
    """A source of a whole set of environment variables."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.EnvFromSource"

    prefix: str | None = None
    config_map_ref: LocalObjectReference | None = None
    secret_ref: LocalObjectReference | None = None


class ContainerPort(K8sModel):
    """A network port of a container."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.ContainerPort"

    container_port: Annotated[Int32, Schema(required=True)]
    name: str | None = None
    protocol: str = "TCP"
    host_port: Int32 | None = None
    host_ip: Annotated[str | None, Field(alias="hostIP")] = None


class VolumeMount(K8sModel):
    """A mount of a volume into a container."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.VolumeMount"

    name: Annotated[str, Schema(required=True)]
    mount_path: Annotated[str, Schema(required=True)]
    read_only: bool | None = None
    sub_path: str | None = None


class ResourceClaim(K8sModel):
    """A DRA resource claim used by a container."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.ResourceClaim"

    name: Annotated[str, Schema(required=True)]
    request: str | None = None


class ResourceRequirements(K8sModel):
    """Compute resources of a container."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.ResourceRequirements"

    limits: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None
    claims: Annotated[
        list[ResourceClaim] | None,
        Schema(list_type="map", list_map_keys=("name",)),
    ] = None


class Container(K8sModel):
    """A container of a pod. Probes, lifecycle hooks and security contexts are kept as is."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.Container"

    name: Annotated[str, Schema(required=True)]
    image: str | None = None
    command: list[str] | None = None
    args: list[str] | None = None
    working_dir: str | None = None
    env: Annotated[list[EnvVar] | None, Schema(list_type="map", list_map_keys=("name",))] = None
    env_from: list[EnvFromSource] | None = None
    ports: Annotated[
        list[ContainerPort] | None,
        Schema(list_type="map", list_map_keys=("containerPort", "protocol")),
    ] = None
    resources: ResourceRequirements | None = None
    volume_mounts: Annotated[
        list[VolumeMount] | None, Schema(list_type="map", list_map_keys=("mountPath",))
    ] = None
    image_pull_policy: str | None = None
    readiness_probe: dict[str, Any] | None = None
    liveness_probe: dict[str, Any] | None = None
    startup_probe: dict[str, Any] | None = None
    security_context: dict[str, Any] | None = None
    restart_policy: str | None = None


class KeyToPath(K8sModel):
    """A key of a ConfigMap or Secret projected to a file."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.KeyToPath"

    key: Annotated[str, Schema(required=True)]
    path: Annotated[str, Schema(required=True)]
    mode: Int32 | None = None


class ConfigMapVolumeSource(K8sModel):
    """A ConfigMap mounted as a volume."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.ConfigMapVolumeSource"

    name: str | None = None
    items: list[KeyToPath] | None = None
    default_mode: Int32 | None = None
    optional: bool | None = None


class SecretVolumeSource(K8sModel):
    """A Secret mounted as a volume."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.SecretVolumeSource"

    secret_name: str | None = None
    items: list[KeyToPath] | None = None
    default_mode: Int32 | None = None
    optional: bool | None = None


class Volume(K8sModel):
    """A pod volume. Sources other than ConfigMap and Secret are kept verbatim."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.Volume"

    name: Annotated[str, Schema(required=True)]
    config_map: ConfigMapVolumeSource | None = None
    secret: SecretVolumeSource | None = None
    empty_dir: dict[str, Any] | None = None
    persistent_volume_claim: dict[str, Any] | None = None
    projected: dict[str, Any] | None = None


class Toleration(K8sModel):
    """A toleration of node taints."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.Toleration"

    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: Int64 | None = None


class PodSchedulingGate(K8sModel):
    """A gate that holds a pod back from scheduling."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.PodSchedulingGate"

    name: Annotated[str, Schema(required=True)]


class PodSpec(K8sModel):
    """A pod specification (partially modelled; the rest is preserved)."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.PodSpec"

    containers: Annotated[
        list[Container] | None, Schema(list_type="map", list_map_keys=("name",))
    ] = None
    init_containers: Annotated[
        list[Container] | None, Schema(list_type="map", list_map_keys=("name",))
    ] = None
    volumes: Annotated[list[Volume] | None, Schema(list_type="map", list_map_keys=("name",))] = None
    node_selector: StringMap | None = None
    tolerations: Annotated[list[Toleration] | None, Schema(list_type="atomic")] = None
    affinity: dict[str, Any] | None = None
    scheduling_gates: Annotated[
        list[PodSchedulingGate] | None, Schema(list_type="map", list_map_keys=("name",))
    ] = None
    image_pull_secrets: Annotated[
        list[LocalObjectReference] | None, Schema(list_type="map", list_map_keys=("name",))
    ] = None
    service_account_name: str | None = None
    security_context: dict[str, Any] | None = None
    termination_grace_period_seconds: Int64 | None = None
    restart_policy: str | None = None
    subdomain: str | None = None
    hostname: str | None = None
    priority_class_name: str | None = None
    runtime_class_name: str | None = None
    overhead: dict[str, Quantity] | None = None


class PodTemplateSpec(K8sModel):
    """A pod template: metadata plus a pod spec."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.PodTemplateSpec"

    metadata: ObjectMeta | None = None
    spec: PodSpec | None = None


class JobSpec(K8sModel):
    """A batch/v1 Job specification (partially modelled; the rest is preserved)."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.batch.v1.JobSpec"

    parallelism: Int32 | None = None
    completions: Int32 | None = None
    completion_mode: str | None = None
    backoff_limit: Int32 | None = None
    active_deadline_seconds: Int64 | None = None
    ttl_seconds_after_finished: Int32 | None = None
    suspend: bool | None = None
    template: Annotated[PodTemplateSpec, Schema(required=True)]


class JobTemplateSpec(K8sModel):
    """A Job template: metadata plus a Job spec."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.batch.v1.JobTemplateSpec"

    metadata: ObjectMeta | None = None
    spec: JobSpec | None = None


class PersistentVolumeClaimTemplate(K8sModel):
    """A PersistentVolumeClaim used as a template (JobSet volumeClaimPolicies)."""

    kube_definition: ClassVar[str | None] = "io.k8s.api.core.v1.PersistentVolumeClaim"

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta | None = None
    spec: dict[str, Any] | None = None


class Condition(K8sModel):
    """A metav1.Condition: the state of one aspect of an object."""

    type: Annotated[
        str,
        Schema(
            required=True,
            max_length=316,
            pattern=(
                r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
            ),
        ),
    ]
    status: Annotated[str, Schema(required=True, enum=("True", "False", "Unknown"))]
    observed_generation: Annotated[Int64 | None, Schema(minimum=0)] = None
    last_transition_time: Annotated[str, Schema(required=True, format="date-time")]
    reason: Annotated[
        str,
        Schema(
            required=True,
            min_length=1,
            max_length=1024,
            pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        ),
    ]
    message: Annotated[str, Schema(required=True, max_length=32768)]
