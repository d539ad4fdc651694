"""The semantic checks of a parsed Configuration, with apimachinery's messages and field
paths (``Invalid value: 0: must be between 1 and 65535`` at ``webhook.port``), plus the
leader-election timing client-go checks at start-up, feature gates and TLS names.

Separate from the model (:mod:`trainer.controller.config_model`: types and defaults) and from
reading the file (:mod:`trainer.controller.config`: lines and messages), as upstream separates
defaulting from validation.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from trainer.controller.config_model import (
    LEADER_ELECTION_JITTER,
    Configuration,
    LeaderElection,
    TLSOptions,
)
from trainer.controller.config_values import (
    CIPHER_SUITES,
    FEATURE_GATES,
    TLS_VERSIONS,
    format_go_duration,
    known_gates,
)

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
                    f"unrecognized feature gate: {name} (known: {known_gates()})",
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
