"""The controller manager Configuration (docs/configuration.md): defaults, strict decoding,
validation."""

from __future__ import annotations

import ssl
import textwrap
from pathlib import Path
from typing import Any

import pytest

from trainer.controller.config import (
    API_VERSION,
    ConfigError,
    Configuration,
    format_go_duration,
    load_config,
    parse_config,
    parse_feature_gates,
    parse_go_duration,
)

HEAD = f"apiVersion: {API_VERSION}\nkind: Configuration\n"

# manifests/base/manager/controller_manager_config.yaml as docs/configuration.md describes it.
SHIPPED = HEAD + textwrap.dedent(
    """\
    health:
      healthProbeBindAddress: :8081
    metrics:
      bindAddress: :8443
    webhook:
      port: 9443
    leaderElection:
      leaderElect: true
      resourceName: trainer.kubeflow.org
      leaseDuration: 15s
      renewDeadline: 10s
      retryPeriod: 2s
    controller:
      groupKindConcurrency:
        TrainJob.trainer.kubeflow.org: 5
        TrainingRuntime.trainer.kubeflow.org: 1
        ClusterTrainingRuntime.trainer.kubeflow.org: 1
    certManagement:
      enable: true
      webhookServiceName: kubeflow-trainer-controller-manager
      webhookSecretName: kubeflow-trainer-webhook-cert
    """
)


def attr(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


DEFAULTS = [
    ("webhook.port", 9443),
    ("webhook.host", ""),
    ("metrics.bind_address", ":8443"),
    ("metrics.secure_serving", True),
    ("metrics.auth.enabled", False),
    ("health.health_probe_bind_address", ":8081"),
    ("health.readiness_endpoint_name", "readyz"),
    ("health.liveness_endpoint_name", "healthz"),
    ("leader_election", None),
    ("leader_elect", False),
    ("controller.group_kind_concurrency", {}),
    ("cert_management.enable", True),
    ("cert_management.webhook_service_name", "kubeflow-trainer-controller-manager"),
    ("cert_management.webhook_secret_name", "kubeflow-trainer-webhook-cert"),
    ("client_connection.qps", 50.0),
    ("client_connection.burst", 100),
    ("status_server.port", 10443),
    ("status_server.qps", 5.0),
    ("status_server.burst", 10),
    ("feature_gates", {}),
    ("tls.min_version", ""),
    ("tls.cipher_suites", []),
    ("tls.next_protos", ["http/1.1"]),
]


@pytest.mark.parametrize(("field", "expected"), DEFAULTS)
def test_go_defaults_without_a_file(field: str, expected: Any) -> None:
    assert attr(load_config(None), field) == expected


@pytest.mark.parametrize(("field", "expected"), DEFAULTS)
def test_go_defaults_for_a_minimal_file(tmp_path: Path, field: str, expected: Any) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEAD)
    assert attr(load_config(path), field) == expected


def test_shipped_config_enables_leader_election() -> None:
    cfg = parse_config(SHIPPED)
    le = cfg.leader_election
    assert le is not None and cfg.leader_elect
    assert (le.resource_name, le.resource_lock, le.resource_namespace) == (
        "trainer.kubeflow.org",
        "leases",
        "",
    )
    assert (le.lease_duration, le.renew_deadline, le.retry_period) == (15.0, 10.0, 2.0)
    assert cfg.concurrency("TrainJob.trainer.kubeflow.org") == 5
    assert cfg.concurrency("TrainingRuntime.trainer.kubeflow.org") == 1
    assert cfg.concurrency("Unlisted.example.com") == 1  # controller-runtime's default


def test_a_leader_election_block_without_durations_gets_recommended_values() -> None:
    cfg = parse_config(HEAD + "leaderElection:\n  leaderElect: true\n")
    le = cfg.leader_election
    assert le is not None
    assert (le.lease_duration, le.renew_deadline, le.retry_period) == (15.0, 10.0, 2.0)
    assert le.resource_name == "trainer.kubeflow.org"


@pytest.mark.parametrize(
    ("body", "field", "expected"),
    [
        ("metrics:\n  bindAddress: ''\n", "metrics.bind_address", ":8443"),
        ("metrics:\n  bindAddress: '0'\n", "metrics.bind_address", "0"),
        ("health:\n  readinessEndpointName: ''\n", "health.readiness_endpoint_name", "readyz"),
        ("webhook:\n", "webhook.port", 9443),  # null block: Go zero value, then defaults
        ("clientConnection:\n  qps: 7\n", "client_connection.qps", 7.0),  # int for a float
        ("statusServer: {port: 12443}\n", "status_server.port", 12443),
    ],
)
def test_go_defaulting_of_empty_values(body: str, field: str, expected: Any) -> None:
    assert attr(parse_config(HEAD + body), field) == expected


def test_round_trip_through_yaml() -> None:
    cfg = parse_config(SHIPPED)
    assert parse_config(cfg.to_yaml()) == cfg
    assert "leaseDuration: 15s" in cfg.to_yaml()


def error_text(text: str, source: str = "config.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(text, source)
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            HEAD + "unknownField: value\n",
            "config.yaml:3: unknownField: unknown field 'unknownField'; accepted fields: "
            "apiVersion, certManagement, clientConnection, controller, featureGates, health, "
            "kind, leaderElection, metrics, statusServer, tls, webhook",
        ),
        (
            HEAD + "webhook:\n  port: 9443\n  unknownWebhookField: value\n",
            "config.yaml:5: webhook.unknownWebhookField: unknown field 'unknownWebhookField'; "
            "accepted fields: host, port",
        ),
        (
            HEAD + "certManagement:\n  serviceName: x\n",
            "config.yaml:4: certManagement.serviceName: unknown field 'serviceName'; accepted "
            "fields: enable, webhookSecretName, webhookServiceName",
        ),
        (
            HEAD + "metrics:\n  auth:\n    enable: true\n",
            "config.yaml:5: metrics.auth.enable: unknown field 'enable'; accepted fields: enabled",
        ),
    ],
)
def test_unknown_fields_are_rejected_with_file_line_and_field(text: str, expected: str) -> None:
    assert error_text(text) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("webhook:\n  port: '9443'\n", "config.yaml:4: webhook.port: must be an integer, got str"),
        ("webhook:\n  port: 1.5\n", "webhook.port: must be an integer, got float 1.5"),
        ("clientConnection:\n  qps: fast\n", "clientConnection.qps: must be a number"),
        ("metrics:\n  secureServing: 'yes'\n", "metrics.secureServing: must be a boolean"),
        ("webhook: 9443\n", "config.yaml:3: webhook: must be a map"),
        ("tls:\n  cipherSuites: TLS_X\n", "tls.cipherSuites: must be a list"),
        (
            "controller:\n  groupKindConcurrency:\n    TrainJob.trainer.kubeflow.org: five\n",
            "config.yaml:5: controller.groupKindConcurrency[TrainJob.trainer.kubeflow.org]: "
            "must be an integer",
        ),
        (
            "leaderElection:\n  leaseDuration: 15\n",
            'config.yaml:4: leaderElection.leaseDuration: must be a duration string such as "15s"',
        ),
        ("leaderElection:\n  retryPeriod: 2 s\n", "leaderElection.retryPeriod: invalid duration"),
        ("featureGates:\n  TrainJobStatus: 'on'\n", "featureGates[TrainJobStatus]: must be a bool"),
    ],
)
def test_wrong_types_name_the_field(body: str, expected: str) -> None:
    assert expected in error_text(HEAD + body)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "apiVersion: config.wrong.group/v1\nkind: Configuration\n",
            "config.yaml:1: apiVersion: must be config.trainer.kubeflow.org/v1alpha1, "
            "got 'config.wrong.group/v1'",
        ),
        (
            f"apiVersion: {API_VERSION}\nkind: WrongKind\n",
            "config.yaml:2: kind: must be Configuration, got 'WrongKind'",
        ),
        ("kind: Configuration\n", "config.yaml:1: apiVersion: required"),
        ("this is not: valid: yaml: content\n", "config.yaml:1: invalid YAML: mapping values"),
        ("webhook:\n  port: [1\n", "config.yaml:3: invalid YAML"),
        ("", "config.yaml:1: must be a YAML map with apiVersion"),
        ("- a\n- b\n", "must be a YAML map"),
        (HEAD + "webhook:\n  port: 1\n  port: 2\n", "config.yaml:5: webhook.port: duplicate field"),
    ],
)
def test_bad_documents(text: str, expected: str) -> None:
    assert expected in error_text(text)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("webhook:\n  port: 0\n", "webhook.port: Invalid value: 0: must be between 1 and 65535"),
        (
            "webhook:\n  port: 99999\n",
            "config.yaml:4: webhook.port: Invalid value: 99999: must be between 1 and 65535",
        ),
        (
            "clientConnection:\n  qps: -10\n",
            "clientConnection.qps: Invalid value: -10: must be greater than or equal to 0",
        ),
        (
            "clientConnection:\n  burst: -1\n",
            "clientConnection.burst: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            "controller:\n  groupKindConcurrency:\n    TrainJob.trainer.kubeflow.org: 0\n",
            "config.yaml:5: controller.groupKindConcurrency[TrainJob.trainer.kubeflow.org]: "
            "Invalid value: 0: must be greater than 0",
        ),
        (
            "statusServer:\n  port: 70000\n",
            "statusServer.port: Invalid value: 70000: must be between 1 and 65535",
        ),
        (
            "statusServer:\n  qps: -0.5\n",
            "statusServer.qps: Invalid value: -0.5: must be greater than or equal to 0",
        ),
        (
            "statusServer:\n  burst: -3\n",
            "statusServer.burst: Invalid value: -3: must be greater than or equal to 0",
        ),
        (
            "leaderElection:\n  leaderElect: true\n  leaseDuration: 5s\n",
            'leaderElection.leaseDuration: Invalid value: "5s": must be greater than '
            "renewDeadline (10s)",
        ),
        (
            "leaderElection:\n  leaderElect: true\n  retryPeriod: 9s\n",
            'leaderElection.renewDeadline: Invalid value: "10s": must be greater than '
            "retryPeriod*1.2",
        ),
        (
            "leaderElection:\n  leaderElect: true\n  retryPeriod: 0s\n",
            'leaderElection.retryPeriod: Invalid value: "0s": must be greater than 0',
        ),
        (
            "leaderElection:\n  resourceLock: configmaps\n",
            'leaderElection.resourceLock: Unsupported value: "configmaps": supported values: '
            '"leases"',
        ),
        (
            "featureGates:\n  Foo: true\n",
            "config.yaml:4: featureGates[Foo]: unrecognized feature gate: Foo",
        ),
        ("tls:\n  minVersion: '1.4'\n", 'tls.minVersion: Unsupported value: "1.4"'),
        ("tls:\n  cipherSuites: [TLS_FOO]\n", 'tls.cipherSuites[0]: Unsupported value: "TLS_FOO"'),
        (
            "tls:\n  minVersion: VersionTLS13\n"
            "  cipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n",
            "tls.cipherSuites: Forbidden: cipher suites cannot be configured with minVersion 1.3",
        ),
    ],
)
def test_validation_messages(body: str, expected: str) -> None:
    assert expected in error_text(HEAD + body)


def test_every_problem_is_reported_in_file_order() -> None:
    body = "clientConnection:\n  qps: -1\nwebhook:\n  port: 0\n"
    assert error_text(HEAD + body).splitlines() == [
        "config.yaml:4: clientConnection.qps: Invalid value: -1: must be greater than or equal "
        "to 0",
        "config.yaml:6: webhook.port: Invalid value: 0: must be between 1 and 65535",
    ]


def test_validation_passes_on_the_boundaries() -> None:
    body = "webhook: {port: 1}\nstatusServer: {port: 65535, qps: 0, burst: 0}\n"
    cfg = parse_config(HEAD + body)
    assert cfg.webhook.port == 1 and cfg.status_server.port == 65535


def test_unreadable_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError, match=f"{missing}: cannot read config file"):
        load_config(missing)
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path)  # a directory


def test_file_errors_name_the_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(HEAD + "webhook:\n  port: 0\n")
    with pytest.raises(ConfigError, match=rf"^{path}:4: webhook\.port: Invalid value: 0"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "seconds", "printed"),
    [
        ("15s", 15.0, "15s"),
        ("10s", 10.0, "10s"),
        ("1m30s", 90.0, "1m30s"),
        ("1.5h", 5400.0, "1h30m0s"),
        ("2h45m", 9900.0, "2h45m0s"),
        ("300ms", 0.3, "300ms"),
        ("1.5s", 1.5, "1.5s"),
        ("250us", 0.00025, "250\u00b5s"),
        ("1\u00b5s", 1e-6, "1\u00b5s"),
        ("10ns", 1e-8, "10ns"),
        ("-2s", -2.0, "-2s"),
        ("0", 0.0, "0s"),
        (".5s", 0.5, "500ms"),
    ],
)
def test_go_durations(text: str, seconds: float, printed: str) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)
    assert format_go_duration(parse_go_duration(text)) == printed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid duration ''"),
        ("15", "use a number with a unit"),
        ("s", "use a number with a unit"),
        ("1d", "unknown unit 'd'"),
        ("1.5.5s", "invalid duration"),
    ],
)
def test_bad_go_durations(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_go_duration(text)


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("TrainJobStatus=true", {"TrainJobStatus": True}),
        ("TrainJobStatus=false", {"TrainJobStatus": False}),
        (" TrainJobStatus = T ,", {"TrainJobStatus": True}),
        ("TrainJobStatus=1,TrainJobStatus=0", {"TrainJobStatus": False}),
        ("", {}),
    ],
)
def test_parse_feature_gates(flag: str, expected: dict[str, bool]) -> None:
    assert parse_feature_gates(flag) == expected


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("TrainJobStatus", "missing bool value for TrainJobStatus"),
        (
            "TrainJobStatus=yes",
            'invalid value of TrainJobStatus=yes, err: strconv.ParseBool: parsing "yes": '
            "invalid syntax",
        ),
        ("Foo=true", "unrecognized feature gate: Foo"),
    ],
)
def test_bad_feature_gates(flag: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_feature_gates(flag)


def test_feature_gate_flag_overrides_the_file() -> None:
    cfg = parse_config(HEAD + "featureGates:\n  TrainJobStatus: true\n")
    assert cfg.feature_enabled("TrainJobStatus")
    off = cfg.with_feature_gates(parse_feature_gates("TrainJobStatus=false"))
    assert not off.feature_enabled("TrainJobStatus")
    assert not Configuration().feature_enabled("TrainJobStatus")  # alpha: default off
    with pytest.raises(KeyError, match="unrecognized feature gate"):
        cfg.feature_enabled("Nope")
    with pytest.raises(ValueError, match="unrecognized feature gate: Nope"):
        cfg.with_feature_gates({"Nope": True})


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("", ssl.TLSVersion.TLSv1_2),
        ("1.3", ssl.TLSVersion.TLSv1_3),
        ("VersionTLS12", ssl.TLSVersion.TLSv1_2),
        ("TLS1.3", ssl.TLSVersion.TLSv1_3),
    ],
)
def test_tls_options_apply_to_an_ssl_context(version: str, expected: ssl.TLSVersion) -> None:
    body = f"tls:\n  minVersion: '{version}'\n" if version else ""
    cfg = parse_config(HEAD + body)
    context = cfg.tls.apply(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    assert context.minimum_version == expected


def test_tls_cipher_suites_are_mapped_to_openssl_names() -> None:
    body = "tls:\n  cipherSuites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n"
    context = parse_config(HEAD + body).tls.apply(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    tls12 = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-RSA-AES128-GCM-SHA256"]
