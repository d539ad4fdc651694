"""The controller's ``config.trainer.kubeflow.org/v1alpha1`` ``Configuration`` as a strict
pydantic model with upstream's Go defaults.

Unknown fields, wrong types and a wrong apiVersion/kind are refused (``extra="forbid"``, strict
types); JSON null is Go's zero value (the default applies); an empty ``bindAddress``, endpoint
name or cert name is replaced by its default, as Go's ``SetDefaults_Configuration`` does. The
semantic checks are in :mod:`trainer.controller.config_validation`, reading a file in
:mod:`trainer.controller.config`.
"""

from __future__ import annotations

import datetime as dt
import ssl
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from trainer.controller.config_values import (
    CIPHER_SUITES,
    FEATURE_GATES,
    TLS_VERSIONS,
    format_go_duration,
    known_gates,
    parse_go_duration,
)

GROUP = "config.trainer.kubeflow.org"
API_VERSION = f"{GROUP}/v1alpha1"
KIND = "Configuration"

DEFAULT_LEASE_NAME = "trainer.kubeflow.org"
TRAINJOB_GROUP_KIND = "TrainJob.trainer.kubeflow.org"
TRAINING_RUNTIME_GROUP_KIND = "TrainingRuntime.trainer.kubeflow.org"
CLUSTER_TRAINING_RUNTIME_GROUP_KIND = "ClusterTrainingRuntime.trainer.kubeflow.org"
LEADER_ELECTION_JITTER = 1.2  # client-go's JitterFactor


def _duration_input(value: Any) -> Any:
    """A Go duration string (as in the file) or a ``timedelta`` (from Python) -> seconds.
    Numbers are refused, as Go's ``metav1.Duration`` refuses them: ``15`` is ambiguous."""
    if isinstance(value, str):
        return parse_go_duration(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise ValueError(
        f'must be a duration string such as "15s", got {type(value).__name__} {value!r}'
    )


Duration = Annotated[
    float,
    BeforeValidator(_duration_input),
    PlainSerializer(format_go_duration, return_type=str),
]
"""Seconds, written as a Go duration string in the file (``"15s"``)."""


# --- the model --------------------------------------------------------------------------------
def _empty_is_default(default: str) -> BeforeValidator:
    """Go's defaulting replaces ``""`` with the default."""
    return BeforeValidator(lambda v: default if v == "" else v)


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        # JSON null (YAML ``~`` or an empty value) is Go's zero value: the default applies.
        if isinstance(data, Mapping):
            return {k: v for k, v in data.items() if v is not None}
        return data


class ControllerWebhook(_Model):
    port: int = 9443
    """Port of the webhook server."""
    host: str = ""
    """Host the webhook server binds; "" is all interfaces."""


class MetricsAuth(_Model):
    enabled: bool = False
    """Require a token allowed by a SubjectAccessReview to read /metrics."""


class ControllerMetrics(_Model):
    bind_address: Annotated[str, _empty_is_default(":8443")] = ":8443"
    """Address of the metrics server; "0" disables it."""
    secure_serving: bool = True
    """Serve metrics over HTTPS."""
    auth: MetricsAuth = Field(default_factory=MetricsAuth)


class ControllerHealth(_Model):
    health_probe_bind_address: Annotated[str, _empty_is_default(":8081")] = ":8081"
    """Address of the probe server; "0" disables it."""
    readiness_endpoint_name: Annotated[str, _empty_is_default("readyz")] = "readyz"
    liveness_endpoint_name: Annotated[str, _empty_is_default("healthz")] = "healthz"


class LeaderElection(_Model):
    """component-base LeaderElectionConfiguration."""

    leader_elect: bool = False
    """Run controllers only on the replica holding the Lease."""
    resource_lock: Annotated[str, _empty_is_default("leases")] = "leases"
    resource_name: Annotated[str, _empty_is_default(DEFAULT_LEASE_NAME)] = DEFAULT_LEASE_NAME
    resource_namespace: str = ""
    """Namespace of the Lease; "" is the controller's own namespace."""
    lease_duration: Duration = 15.0
    renew_deadline: Duration = 10.0
    retry_period: Duration = 2.0


class ControllerConfigurationSpec(_Model):
    group_kind_concurrency: dict[str, int] = Field(default_factory=dict)
    """Concurrent reconciles per controller, keyed ``Kind.group``; unset kinds get 1."""


class CertManagement(_Model):
    enable: bool = True
    webhook_service_name: Annotated[
        str, _empty_is_default("kubeflow-trainer-controller-manager")
    ] = "kubeflow-trainer-controller-manager"
    webhook_secret_name: Annotated[str, _empty_is_default("kubeflow-trainer-webhook-cert")] = (
        "kubeflow-trainer-webhook-cert"
    )


class ClientConnection(_Model):
    qps: float = 50.0
    burst: int = 100


class StatusServer(_Model):
    port: int = 10443
    qps: float = 5.0
    burst: int = 10


class TLSOptions(_Model):
    """TLS settings of the webhook, metrics and status servers."""

    min_version: str = ""
    """1.0, 1.1, 1.2 or 1.3 (also VersionTLS12 / TLS1.2 spellings); "" keeps the default 1.2."""
    cipher_suites: list[str] = Field(default_factory=list)
    """Go (IANA) cipher suite names; empty keeps the library defaults."""
    next_protos: list[str] = Field(default_factory=lambda: ["http/1.1"])
    """ALPN protocols; HTTP/1.1 only by default (controller-runtime disables HTTP/2)."""

    def minimum_version(self) -> ssl.TLSVersion:
        return TLS_VERSIONS.get(self.min_version, ssl.TLSVersion.TLSv1_2)

    def openssl_ciphers(self) -> str | None:
        """``cipherSuites`` as an OpenSSL cipher list (TLS 1.3 suites, which OpenSSL always
        enables, are left out); None when the list is empty or names only TLS 1.3 suites."""
        names = [CIPHER_SUITES[s] for s in self.cipher_suites if CIPHER_SUITES.get(s)]
        return ":".join(n for n in names if n) or None

    def served_protocols(self) -> tuple[str, ...]:
        """``nextProtos`` this process can serve: HTTP/1.1 only (its servers do not speak
        HTTP/2, so ``h2`` is not offered; controller-runtime's default disables it too)."""
        return tuple(p for p in self.next_protos if p != "h2") or ("http/1.1",)

    def apply(self, context: ssl.SSLContext) -> ssl.SSLContext:
        """Set the minimum version, cipher suites and ALPN protocols on ``context``."""
        context.minimum_version = self.minimum_version()
        names = [CIPHER_SUITES[s] for s in self.cipher_suites if CIPHER_SUITES.get(s)]
        if names:
            context.set_ciphers(":".join(n for n in names if n))
        if self.next_protos:
            context.set_alpn_protocols(self.next_protos)
        return context


class Configuration(_Model):
    """``config.trainer.kubeflow.org/v1alpha1`` ``Configuration`` with Go's defaults."""

    api_version: str = API_VERSION
    kind: str = KIND
    webhook: ControllerWebhook = Field(default_factory=ControllerWebhook)
    leader_election: LeaderElection | None = None
    """Unset: no leader election (upstream's behaviour without a config file)."""
    metrics: ControllerMetrics = Field(default_factory=ControllerMetrics)
    health: ControllerHealth = Field(default_factory=ControllerHealth)
    controller: ControllerConfigurationSpec = Field(default_factory=ControllerConfigurationSpec)
    cert_management: CertManagement = Field(default_factory=CertManagement)
    client_connection: ClientConnection = Field(default_factory=ClientConnection)
    status_server: StatusServer = Field(default_factory=StatusServer)
    feature_gates: dict[str, bool] = Field(default_factory=dict)
    tls: TLSOptions = Field(default_factory=TLSOptions)

    map_fields: ClassVar[frozenset[str]] = frozenset({"groupKindConcurrency", "featureGates"})

    @field_validator("api_version")
    @classmethod
    def _api_version(cls, value: str) -> str:
        if value != API_VERSION:
            raise ValueError(f"must be {API_VERSION}, got {value!r}")
        return value

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        if value != KIND:
            raise ValueError(f"must be {KIND}, got {value!r}")
        return value

    # --- helpers for the manager ------------------------------------------------------------
    @property
    def leader_elect(self) -> bool:
        return self.leader_election is not None and self.leader_election.leader_elect

    def concurrency(self, group_kind: str) -> int:
        """Concurrent reconciles for ``Kind.group`` (controller-runtime's default is 1)."""
        return self.controller.group_kind_concurrency.get(group_kind, 1)

    def feature_enabled(self, name: str) -> bool:
        """Whether feature gate ``name`` is on (the file's value, else the gate's default)."""
        if name not in FEATURE_GATES:
            raise KeyError(f"unrecognized feature gate: {name} (known: {known_gates()})")
        return self.feature_gates.get(name, FEATURE_GATES[name].default)

    def with_feature_gates(self, overrides: Mapping[str, bool]) -> Configuration:
        """A copy whose gates are the file's, overridden by ``overrides`` (``--feature-gates``
        wins over the file, as upstream)."""
        for name in overrides:
            if name not in FEATURE_GATES:
                raise ValueError(f"unrecognized feature gate: {name} (known: {known_gates()})")
        return self.model_copy(update={"feature_gates": {**self.feature_gates, **overrides}})

    def to_yaml(self) -> str:
        """The configuration as a YAML document (durations as Go strings)."""
        data = self.model_dump(by_alias=True, mode="json", exclude_none=True)
        head = {"apiVersion": data.pop("apiVersion"), "kind": data.pop("kind")}
        return yaml.safe_dump({**head, **data}, sort_keys=False)
