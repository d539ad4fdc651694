"""The controller manager's Configuration file (spec 6.1): ``--config`` and ``--feature-gates``.

Upstream decodes ``config.trainer.kubeflow.org/v1alpha1`` ``Configuration`` strictly (unknown
fields, wrong types and a wrong apiVersion/kind are errors), fills Go defaults, then validates
with apimachinery field errors. This module does the same with a pydantic model
(``extra="forbid"``, strict types) and reports every problem as
``<file>:<line>: <field path>: <message>``, so a user sees which line of which file to fix.

Defaults are upstream's Go defaults. Without a config file those apply, and **leader election
is then off** (``leaderElection`` is unset); the shipped config
(``manifests/base/manager/controller_manager_config.yaml``) turns it on with the Lease
``trainer.kubeflow.org``, 15s / 10s / 2s.

Deliberate differences from upstream, each stricter or clearer, never looser:

- A ``leaderElection`` block without durations gets component-base's recommended 15s / 10s /
  2s, ``resourceLock: leases`` and ``resourceName: trainer.kubeflow.org`` (upstream passes Go
  zero durations to controller-runtime, which then refuses to start).
- With ``leaderElect: true`` the durations are checked the way client-go's
  ``NewLeaderElector`` checks them (positive, leaseDuration > renewDeadline > 1.2 *
  retryPeriod) when the file is loaded, not at start-up.
- ``featureGates`` keys must be known gates (component-base's "unrecognized feature gate").
- The Go-default-for-empty rule is kept: an empty ``bindAddress``, endpoint name or cert name is
  replaced by its default, as Go's ``SetDefaults_Configuration`` does for ``""``.
"""

from __future__ import annotations

import datetime as dt
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, get_args

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from trainer.api.safeload import CONFIG_LIMITS, InputError, decode, load_yaml, read_bytes

GROUP = "config.trainer.kubeflow.org"
API_VERSION = f"{GROUP}/v1alpha1"
KIND = "Configuration"

DEFAULT_LEASE_NAME = "trainer.kubeflow.org"
TRAINJOB_GROUP_KIND = "TrainJob.trainer.kubeflow.org"
TRAINING_RUNTIME_GROUP_KIND = "TrainingRuntime.trainer.kubeflow.org"
CLUSTER_TRAINING_RUNTIME_GROUP_KIND = "ClusterTrainingRuntime.trainer.kubeflow.org"
LEADER_ELECTION_JITTER = 1.2  # client-go's JitterFactor


# --- Go durations ---------------------------------------------------------------------------
_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # Greek mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d*\.?\d*)([a-zA-Z\u00b5\u03bc]+)")


def parse_go_duration(text: str) -> float:
    """Seconds in a Go ``time.ParseDuration`` string: ``"15s"``, ``"1m30s"``, ``"1.5h"``,
    ``"300ms"``, ``"-2s"``, ``"0"``. Raises ValueError saying what is accepted."""
    original = text
    hint = (
        f"invalid duration {original!r}: use a number with a unit, e.g. 15s, 1m30s, 500ms "
        "(units ns, us, ms, s, m, h)"
    )
    text = text.strip()
    sign = 1.0
    if text and text[0] in "+-":
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(hint)
    total = 0.0
    pos = 0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None or match.group(1) in ("", "."):
            raise ValueError(hint)
        number, unit = match.groups()
        if unit not in _UNITS:
            raise ValueError(
                f"invalid duration {original!r}: unknown unit {unit!r} (units ns, us, ms, s, m, h)"
            )
        total += float(number) * _UNITS[unit]
        pos = match.end()
    return sign * total


def _trim(number: str) -> str:
    return number.rstrip("0").rstrip(".") if "." in number else number


def format_go_duration(seconds: float) -> str:
    """``seconds`` the way Go's ``Duration.String`` prints it: ``15s``, ``1m30s``, ``2h0m0s``,
    ``1.5s``, ``500ms``, ``0s``."""
    nanos = round(seconds * 1e9)
    if nanos == 0:
        return "0s"
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos < 1_000:
        return f"{sign}{nanos}ns"
    if nanos < 1_000_000:
        return f"{sign}{_trim(f'{nanos / 1e3:.3f}')}\u00b5s"
    if nanos < 1_000_000_000:
        return f"{sign}{_trim(f'{nanos / 1e6:.6f}')}ms"
    hours, rest = divmod(nanos, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    secs = _trim(f"{rest / 1e9:.9f}")
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


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


# --- feature gates ----------------------------------------------------------------------------
@dataclass(frozen=True)
class FeatureSpec:
    default: bool
    stage: str  # Alpha, Beta, GA


FEATURE_GATES: dict[str, FeatureSpec] = {
    "TrainJobStatus": FeatureSpec(default=False, stage="Alpha"),
}
"""Every feature gate of v2.3 (spec 6.1: only ``TrainJobStatus``)."""

_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_feature_gates(text: str) -> dict[str, bool]:
    """The ``--feature-gates`` flag: ``"A=true,B=false"`` -> ``{"A": True, "B": False}``.

    Values are Go ``strconv.ParseBool`` spellings; messages are component-base's. Raises
    ValueError for a missing value, a bad bool, or a gate that does not exist.
    """
    gates: dict[str, bool] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, raw = part.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"missing bool value for {name}")
        value = raw.strip()
        if value in _TRUE:
            gates[name] = True
        elif value in _FALSE:
            gates[name] = False
        else:
            raise ValueError(
                f'invalid value of {name}={value}, err: strconv.ParseBool: parsing "{value}": '
                "invalid syntax"
            )
    for name in gates:
        if name not in FEATURE_GATES:
            raise ValueError(f"unrecognized feature gate: {name} (known: {_known_gates()})")
    return gates


def _known_gates() -> str:
    return ", ".join(sorted(FEATURE_GATES))


# --- TLS --------------------------------------------------------------------------------------
TLS_VERSIONS: dict[str, ssl.TLSVersion] = {}
for _minor, _version in (
    ("0", ssl.TLSVersion.TLSv1),
    ("1", ssl.TLSVersion.TLSv1_1),
    ("2", ssl.TLSVersion.TLSv1_2),
    ("3", ssl.TLSVersion.TLSv1_3),
):
    for _spelling in (f"1.{_minor}", f"TLS1.{_minor}", f"VersionTLS1{_minor}"):
        TLS_VERSIONS[_spelling] = _version

# Go's cipher suite names (tls.CipherSuites() and tls.InsecureCipherSuites()) -> OpenSSL's.
# TLS 1.3 suites (OpenSSL name None) are accepted, as Go accepts them, and not configurable.
CIPHER_SUITES: dict[str, str | None] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA": "DES-CBC3-SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA": "ECDHE-RSA-DES-CBC3-SHA",
    "TLS_RSA_WITH_RC4_128_SHA": "RC4-SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA": "ECDHE-RSA-RC4-SHA",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA": "ECDHE-ECDSA-RC4-SHA",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}


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
            raise KeyError(f"unrecognized feature gate: {name} (known: {_known_gates()})")
        return self.feature_gates.get(name, FEATURE_GATES[name].default)

    def with_feature_gates(self, overrides: Mapping[str, bool]) -> Configuration:
        """A copy whose gates are the file's, overridden by ``overrides`` (``--feature-gates``
        wins over the file, as upstream)."""
        for name in overrides:
            if name not in FEATURE_GATES:
                raise ValueError(f"unrecognized feature gate: {name} (known: {_known_gates()})")
        return self.model_copy(update={"feature_gates": {**self.feature_gates, **overrides}})

    def to_yaml(self) -> str:
        """The configuration as a YAML document (durations as Go strings)."""
        data = self.model_dump(by_alias=True, mode="json", exclude_none=True)
        head = {"apiVersion": data.pop("apiVersion"), "kind": data.pop("kind")}
        return yaml.safe_dump({**head, **data}, sort_keys=False)


# --- validation -------------------------------------------------------------------------------
Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class FieldIssue:
    """One problem: ``loc`` is the path in the document, ``message`` what is wrong and what is
    accepted."""

    loc: Loc
    message: str

    @property
    def field(self) -> str:
        return field_path(self.loc)


def field_path(loc: Loc) -> str:
    """``webhook.port``, ``controller.groupKindConcurrency[TrainJob.trainer.kubeflow.org]``,
    ``tls.cipherSuites[0]``: apimachinery's field.Path rendering."""
    out = ""
    previous: str | int | None = None
    for part in loc:
        if isinstance(part, int) or previous in Configuration.map_fields:
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
        previous = part
    return out or "<document>"


def _go_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def _invalid(loc: Loc, value: Any, detail: str) -> FieldIssue:
    """apimachinery's ``field.Invalid`` text: ``Invalid value: <value>: <detail>``."""
    return FieldIssue(loc, f"Invalid value: {_go_value(value)}: {detail}")


def _port(loc: Loc, value: int) -> list[FieldIssue]:
    return [] if 1 <= value <= 65535 else [_invalid(loc, value, "must be between 1 and 65535")]


def _non_negative(loc: Loc, value: float) -> list[FieldIssue]:
    return [] if value >= 0 else [_invalid(loc, value, "must be greater than or equal to 0")]


def validate(cfg: Configuration) -> list[FieldIssue]:
    """Every semantic problem of ``cfg``, with upstream's messages and field paths (webhook and
    status-server ports, QPS/burst, concurrency), plus leader-election timing, feature gates
    and TLS."""
    issues: list[FieldIssue] = []
    issues += _port(("webhook", "port"), cfg.webhook.port)
    issues += _non_negative(("clientConnection", "qps"), cfg.client_connection.qps)
    issues += _non_negative(("clientConnection", "burst"), cfg.client_connection.burst)
    for group_kind, count in sorted(cfg.controller.group_kind_concurrency.items()):
        if count < 1:
            loc: Loc = ("controller", "groupKindConcurrency", group_kind)
            issues.append(_invalid(loc, count, "must be greater than 0"))
    issues += _port(("statusServer", "port"), cfg.status_server.port)
    issues += _non_negative(("statusServer", "qps"), cfg.status_server.qps)
    issues += _non_negative(("statusServer", "burst"), cfg.status_server.burst)
    if cfg.leader_election is not None:
        issues += _validate_leader_election(cfg.leader_election)
    for name in sorted(cfg.feature_gates):
        if name not in FEATURE_GATES:
            issues.append(
                FieldIssue(
                    ("featureGates", name),
                    f"unrecognized feature gate: {name} (known: {_known_gates()})",
                )
            )
    issues += _validate_tls(cfg.tls)
    return issues


def _validate_leader_election(le: LeaderElection) -> list[FieldIssue]:
    issues: list[FieldIssue] = []
    base = ("leaderElection",)
    if le.resource_lock != "leases":
        issues.append(
            FieldIssue(
                (*base, "resourceLock"),
                f'Unsupported value: "{le.resource_lock}": supported values: "leases"',
            )
        )
    if not le.leader_elect:
        return issues
    durations = {
        "leaseDuration": le.lease_duration,
        "renewDeadline": le.renew_deadline,
        "retryPeriod": le.retry_period,
    }
    for name, value in durations.items():
        if value <= 0:
            issues.append(
                _invalid((*base, name), format_go_duration(value), "must be greater than 0")
            )
    if any(v <= 0 for v in durations.values()):
        return issues
    if le.lease_duration <= le.renew_deadline:
        issues.append(
            _invalid(
                (*base, "leaseDuration"),
                format_go_duration(le.lease_duration),
                f"must be greater than renewDeadline ({format_go_duration(le.renew_deadline)})",
            )
        )
    if le.renew_deadline <= LEADER_ELECTION_JITTER * le.retry_period:
        issues.append(
            _invalid(
                (*base, "renewDeadline"),
                format_go_duration(le.renew_deadline),
                f"must be greater than retryPeriod*{LEADER_ELECTION_JITTER} "
                f"({format_go_duration(LEADER_ELECTION_JITTER * le.retry_period)})",
            )
        )
    return issues


def _validate_tls(tls: TLSOptions) -> list[FieldIssue]:
    issues: list[FieldIssue] = []
    if tls.min_version and tls.min_version not in TLS_VERSIONS:
        issues.append(
            FieldIssue(
                ("tls", "minVersion"),
                f'Unsupported value: "{tls.min_version}": supported values: "1.0", "1.1", '
                '"1.2", "1.3" (or VersionTLS10..VersionTLS13)',
            )
        )
    for i, suite in enumerate(tls.cipher_suites):
        if suite not in CIPHER_SUITES:
            issues.append(
                FieldIssue(
                    ("tls", "cipherSuites", i),
                    f'Unsupported value: "{suite}": use Go cipher suite names such as '
                    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
                )
            )
    if tls.cipher_suites and TLS_VERSIONS.get(tls.min_version) == ssl.TLSVersion.TLSv1_3:
        issues.append(
            FieldIssue(
                ("tls", "cipherSuites"),
                "Forbidden: cipher suites cannot be configured with minVersion 1.3 "
                "(TLS 1.3 suites are fixed)",
            )
        )
    for i, proto in enumerate(tls.next_protos):
        if not proto:
            issues.append(FieldIssue(("tls", "nextProtos", i), "Required value"))
    return issues


# --- loading ----------------------------------------------------------------------------------
class ConfigError(ValueError):
    """A configuration file that cannot be used. ``issues`` holds every problem; the message
    has one ``<file>:<line>: <field>: <message>`` line per problem."""

    def __init__(self, source: str, issues: list[tuple[int | None, str, str]]) -> None:
        self.source = source
        self.issues = issues
        lines = []
        for line, field, message in issues:
            where = f"{source}:{line}" if line else source
            lines.append(f"{where}: {field}: {message}" if field else f"{where}: {message}")
        super().__init__("\n".join(lines))


_TYPE_NAMES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "string_type": "must be a string",
    "bool_type": "must be a boolean (true or false)",
    "float_type": "must be a number",
    "dict_type": "must be a map",
    "model_type": "must be a map",
    "model_attributes_type": "must be a map",
    "list_type": "must be a list",
}


def _positions(node: yaml.Node, loc: Loc, out: dict[Loc, int], dups: list[tuple[Loc, int]]) -> None:
    """Record the 1-based line of every key/item below ``node`` (and duplicate keys)."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = (*loc, key)
            if key in seen:
                dups.append((child, key_node.start_mark.line + 1))
            seen.add(key)
            out.setdefault(child, key_node.start_mark.line + 1)
            _positions(value_node, child, out, dups)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = (*loc, i)
            out.setdefault(child, item.start_mark.line + 1)
            _positions(item, child, out, dups)


def _line_of(loc: Loc, lines: dict[Loc, int]) -> int | None:
    for end in range(len(loc), 0, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _accepted(loc: Loc) -> list[str]:
    """Field names accepted in the object at ``loc`` (for "unknown field" messages)."""
    model: type[BaseModel] = Configuration
    for part in loc:
        target: type[BaseModel] | None = None
        for name, info in model.model_fields.items():
            if part in (info.alias, name):
                candidates = (info.annotation, *get_args(info.annotation))
                for candidate in candidates:
                    if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                        target = candidate
                break
        if target is None:
            return []
        model = target
    return sorted(info.alias or name for name, info in model.model_fields.items())


def _describe(error: Mapping[str, Any]) -> str:
    kind = str(error.get("type"))
    loc = tuple(error.get("loc") or ())
    if kind == "extra_forbidden":
        accepted = _accepted(loc[:-1])
        hint = f"; accepted fields: {', '.join(accepted)}" if accepted else ""
        return f"unknown field {str(loc[-1])!r}{hint}"
    if kind in _TYPE_NAMES:
        value = error.get("input")
        return f"{_TYPE_NAMES[kind]}, got {type(value).__name__} {value!r}"
    if kind == "value_error":
        ctx = error.get("ctx") or {}
        return str(ctx.get("error") or error.get("msg"))
    return str(error.get("msg"))


_COMPOSER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_config(text: str, source: str = "<config>") -> Configuration:
    """A validated :class:`Configuration` from YAML ``text``; ``source`` names the file in
    errors. Raises :class:`ConfigError` listing every problem with its line."""
    try:
        # The bounded reader first (UTF-8, size, depth, aliases, numbers); duplicates are
        # reported below with their field path.
        data = load_yaml(text, source, CONFIG_LIMITS, allow_duplicate_keys=True)
        root = yaml.compose(text, Loader=_COMPOSER)  # safe now: depth and size are bounded
    except InputError as exc:
        problem = exc.message.removeprefix("YAML syntax error: ")
        raise ConfigError(source, [(exc.line, "", f"invalid YAML: {problem}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, [(None, "", f"invalid YAML: {exc}")]) from exc
    if not isinstance(data, dict) or root is None:
        raise ConfigError(
            source,
            [(1, "", f"must be a YAML map with apiVersion: {API_VERSION} and kind: {KIND}")],
        )
    lines: dict[Loc, int] = {}
    dups: list[tuple[Loc, int]] = []
    _positions(root, (), lines, dups)
    issues: list[tuple[int | None, str, str]] = [
        (line, field_path(loc), "duplicate field") for loc, line in dups
    ]
    for required, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        if required not in data:
            issues.append((1, required, f"required: must be {expected}"))
    try:
        cfg = Configuration.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(error["loc"])
            issues.append((_line_of(loc, lines), field_path(loc), _describe(error)))
        raise ConfigError(source, issues) from None
    for issue in validate(cfg):
        issues.append((_line_of(issue.loc, lines), issue.field, issue.message))
    if issues:
        # In file order, so the message reads top to bottom like the file.
        issues.sort(key=lambda issue: issue[0] if issue[0] is not None else 1 << 30)
        raise ConfigError(source, issues)
    return cfg


def load_config(path: str | Path | None) -> Configuration:
    """The Configuration in ``path`` (``--config``), or Go's defaults when ``path`` is None or
    empty (leader election then off). Raises :class:`ConfigError` naming the file, the line and
    the field of each problem."""
    if not path:
        return Configuration()
    source = str(path)
    try:
        text = decode(read_bytes(path, CONFIG_LIMITS, source), source, CONFIG_LIMITS)
    except InputError as exc:
        if exc.message.startswith("cannot read: "):
            message = "cannot read config file: " + exc.message.removeprefix("cannot read: ")
        else:
            message = f"config file {exc.message}"
        raise ConfigError(source, [(exc.line, "", message)]) from None
    return parse_config(text, source)
