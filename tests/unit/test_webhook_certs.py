"""Webhook certificates: what is generated, when it is rotated, how it is stored and reloaded
(docs/certificates.md: CA 10 years, serving certificate 1 year, rotate 90 days early)."""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
import stat
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhooks.certs import (
    TRAINER_CA,
    Action,
    CertBundle,
    CertRotator,
    SecretState,
    ServerTLS,
    ca_bundle_for,
    generate_bundle,
    generate_ca,
    generate_serving_cert,
    needs_rotation,
    plan,
    read_cert_dir,
    serial_of,
    service_dns_names,
    tls_version,
    write_cert_dir,
)

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
HOSTS = service_dns_names("kubeflow-trainer-controller-manager", "kubeflow-system")


@pytest.fixture(scope="module")
def bundle() -> CertBundle:
    return generate_bundle(HOSTS, T0, ca_name=TRAINER_CA)


def _cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def test_service_dns_names() -> None:
    assert HOSTS == [
        "kubeflow-trainer-controller-manager.kubeflow-system.svc",
        "kubeflow-trainer-controller-manager.kubeflow-system",
        "kubeflow-trainer-controller-manager",
    ]


def test_ca(bundle: CertBundle) -> None:
    ca = _cert(bundle.ca_cert)
    assert ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kubeflow-trainer-ca"
    assert ca.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == (
        "kubeflow-trainer"
    )
    assert ca.issuer == ca.subject
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.not_valid_after_utc == T0 + timedelta(days=3650)
    assert ca.not_valid_before_utc <= T0
    ca.verify_directly_issued_by(ca)


def test_serving_cert(bundle: CertBundle) -> None:
    cert = _cert(bundle.cert)
    ca = _cert(bundle.ca_cert)
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == HOSTS
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.not_valid_after_utc == T0 + timedelta(days=365)
    assert bundle.key.startswith(b"-----BEGIN PRIVATE KEY-----")


def test_ip_sans(bundle: CertBundle) -> None:
    pem, _ = generate_serving_cert(
        bundle.ca_cert, bundle.ca_key, ["localhost", "127.0.0.1", "::1"], T0
    )
    san = _cert(pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]


def test_serving_cert_never_outlives_its_ca() -> None:
    ca_cert, ca_key = generate_ca(T0, validity=timedelta(days=30))
    pem, _ = generate_serving_cert(ca_cert, ca_key, ["x"], T0)
    assert _cert(pem).not_valid_after_utc == T0 + timedelta(days=30)


@pytest.mark.parametrize(
    ("now", "due"),
    [
        (T0, False),
        (T0 + timedelta(days=274), False),  # 91 days left
        (T0 + timedelta(days=275), True),  # exactly 90 days left
        (T0 + timedelta(days=400), True),  # expired
        (T0 - timedelta(hours=2), True),  # not valid yet (1 h backdating covers skew)
        (T0 - timedelta(minutes=30), False),
    ],
)
def test_needs_rotation(bundle: CertBundle, now: datetime, due: bool) -> None:
    assert needs_rotation(bundle.cert, now) is due


def test_needs_rotation_of_garbage() -> None:
    assert needs_rotation(b"not a certificate", T0)


def test_plan(bundle: CertBundle) -> None:
    other = generate_bundle(HOSTS, T0)
    assert plan(None, HOSTS, T0) is Action.NEW_CA
    assert plan(bundle, HOSTS, T0 + timedelta(days=10)) is Action.REUSE
    # Serving certificate due, CA fine: a new serving certificate from the same CA.
    assert plan(bundle, HOSTS, T0 + timedelta(days=300)) is Action.NEW_CERT
    # Certificate for another service name.
    assert plan(bundle, ["other.kubeflow-system.svc"], T0) is Action.NEW_CERT
    # A key that is not the certificate's; a certificate from another CA.
    assert plan(CertBundle(bundle.ca_cert, bundle.ca_key, bundle.cert, other.key), HOSTS, T0) is (
        Action.NEW_CERT
    )
    assert plan(CertBundle(bundle.ca_cert, bundle.ca_key, other.cert, other.key), HOSTS, T0) is (
        Action.NEW_CERT
    )
    # The CA's key does not match, or the CA is due: everything anew.
    assert plan(CertBundle(bundle.ca_cert, other.ca_key, bundle.cert, bundle.key), HOSTS, T0) is (
        Action.NEW_CA
    )
    assert plan(bundle, HOSTS, T0 + timedelta(days=3650 - 89)) is Action.NEW_CA
    # A serving certificate is not a CA.
    assert plan(CertBundle(bundle.cert, bundle.key, bundle.cert, bundle.key), HOSTS, T0) is (
        Action.NEW_CA
    )


def test_secret_data_round_trip(bundle: CertBundle) -> None:
    data = bundle.secret_data()
    assert sorted(data) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert CertBundle.from_secret_data(data) == bundle
    assert CertBundle.from_secret_data({**data, "tls.key": b""}) is None
    assert CertBundle.from_secret_data(None) is None


def test_ca_bundle_keeps_the_previous_ca_while_valid(bundle: CertBundle) -> None:
    new = generate_bundle(HOSTS, T0)
    both = ca_bundle_for(new, bundle, T0)
    assert both.count(b"BEGIN CERTIFICATE") == 2
    assert both.startswith(new.ca_cert)
    assert ca_bundle_for(new, bundle, T0 + timedelta(days=4000)) == new.ca_cert
    assert ca_bundle_for(new, None, T0) == new.ca_cert
    assert ca_bundle_for(new, new, T0) == new.ca_cert


def test_write_cert_dir(tmp_path: Path, bundle: CertBundle) -> None:
    target = tmp_path / "serving-certs"
    write_cert_dir(target, bundle)
    assert sorted(p.name for p in target.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert (target / "ca.crt").read_bytes() == bundle.ca_cert
    assert stat.S_IMODE((target / "tls.key").stat().st_mode) == 0o600
    assert read_cert_dir(target) == (bundle.cert, bundle.key)
    # Overwriting replaces the files (no temporary files are left behind).
    other = generate_bundle(HOSTS, T0)
    write_cert_dir(target, other)
    assert read_cert_dir(target) == (other.cert, other.key)
    assert sorted(p.name for p in target.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert read_cert_dir(tmp_path / "missing") is None


def test_server_tls(tmp_path: Path, bundle: CertBundle) -> None:
    tls = ServerTLS()
    assert tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert not tls.loaded
    assert tls.reload(bundle.cert, bundle.key) is True
    assert tls.loaded and tls.serial == serial_of(bundle.cert)
    assert tls.reload(bundle.cert, bundle.key) is False  # same certificate: nothing to do
    other = generate_bundle(HOSTS, T0)
    with pytest.raises(ssl.SSLError):
        tls.reload(other.cert, bundle.key)  # key does not match
    assert tls.serial == serial_of(bundle.cert)
    write_cert_dir(tmp_path, other)
    assert tls.reload(tmp_path / "tls.crt", tmp_path / "tls.key") is True
    assert tls.serial == serial_of(other.cert)


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("1.2", ssl.TLSVersion.TLSv1_2),
        ("1.3", ssl.TLSVersion.TLSv1_3),
        ("VersionTLS12", ssl.TLSVersion.TLSv1_2),
        ("TLS13", ssl.TLSVersion.TLSv1_3),
    ],
)
def test_tls_version(text: str, version: ssl.TLSVersion) -> None:
    assert tls_version(text) is version


def test_tls_version_rejects_unknown() -> None:
    with pytest.raises(ValueError, match=r"accepted 1\.0, 1\.1, 1\.2, 1\.3"):
        tls_version("1.4")


# ---------------------------------------------------------------------------------------------
# The rotator, with a fake Secret, webhook configurations and TLS context


class FakeCluster:
    """A Secret with optimistic concurrency, the caBundle of the webhook configurations, and
    what the server has loaded."""

    def __init__(self) -> None:
        self.secret: dict[str, bytes] | None = None
        self.version = 0
        self.writes = 0
        self.injected: list[bytes] = []
        self.loaded: list[bytes] = []
        self.files: list[CertBundle] = []
        self.before_write: list[dict[str, bytes]] = []
        """Secrets another replica writes just before our next write (a conflict)."""

    async def read_secret(self) -> SecretState | None:
        if self.secret is None:
            return None
        return SecretState(dict(self.secret), str(self.version))

    async def write_secret(self, data: Mapping[str, bytes], version: str | None) -> bool:
        if self.before_write:
            self.secret = self.before_write.pop(0)
            self.version += 1
        current = str(self.version) if self.secret is not None else None
        if version != current:
            return False
        self.secret = dict(data)
        self.version += 1
        self.writes += 1
        return True

    async def inject(self, ca_bundle: bytes) -> None:
        self.injected.append(ca_bundle)

    async def write_files(self, bundle: CertBundle) -> None:
        self.files.append(bundle)

    def reload(self, cert: bytes, key: bytes) -> None:
        self.loaded.append(cert)

    def rotator(self, clock: list[datetime], **kw: object) -> CertRotator:
        return CertRotator(
            hosts=HOSTS,
            reload=self.reload,
            now=lambda: clock[0],
            read_secret=self.read_secret,
            write_secret=self.write_secret,
            inject_ca_bundle=self.inject,
            write_files=self.write_files,
            **kw,  # type: ignore[arg-type]
        )


async def test_rotator_generates_stores_serves_and_injects() -> None:
    cluster = FakeCluster()
    clock = [T0]
    rotator = cluster.rotator(clock)
    assert not rotator.is_ready()
    assert await rotator.sync() is Action.NEW_CA
    assert rotator.is_ready()
    stored = CertBundle.from_secret_data(cluster.secret)
    assert stored is not None and stored == rotator.serving
    assert cluster.loaded == [stored.cert]
    assert cluster.files == [stored]
    assert cluster.injected == [stored.ca_cert]
    # A periodic check with nothing due does nothing.
    clock[0] = T0 + timedelta(days=100)
    assert await rotator.sync() is Action.REUSE
    assert (cluster.writes, len(cluster.loaded), len(cluster.injected)) == (1, 1, 1)


async def test_second_replica_reuses_the_secret() -> None:
    cluster = FakeCluster()
    clock = [T0]
    await cluster.rotator(clock).sync()
    second = cluster.rotator(clock)
    assert await second.sync() is Action.REUSE
    assert cluster.writes == 1
    assert second.serving == CertBundle.from_secret_data(cluster.secret)


async def test_rotation_of_the_serving_cert_keeps_the_ca() -> None:
    cluster = FakeCluster()
    clock = [T0]
    rotator = cluster.rotator(clock)
    await rotator.sync()
    first = rotator.serving
    assert first is not None
    clock[0] = T0 + timedelta(days=276)  # 89 days before the serving cert expires
    assert await rotator.sync() is Action.NEW_CERT
    second = rotator.serving
    assert second is not None
    assert second.ca_cert == first.ca_cert and second.cert != first.cert
    assert cluster.loaded == [first.cert, second.cert]
    assert cluster.injected == [first.ca_cert]  # the caBundle did not change


async def test_rotation_of_the_ca_injects_old_and_new() -> None:
    cluster = FakeCluster()
    clock = [T0]
    rotator = cluster.rotator(clock)
    await rotator.sync()
    first = rotator.serving
    assert first is not None
    clock[0] = T0 + timedelta(days=3650 - 80)
    assert await rotator.sync() is Action.NEW_CA
    second = rotator.serving
    assert second is not None and second.ca_cert != first.ca_cert
    assert cluster.injected[-1] == second.ca_cert.rstrip(b"\n") + b"\n" + first.ca_cert


async def test_conflicting_write_uses_the_winners_certificates() -> None:
    cluster = FakeCluster()
    theirs = generate_bundle(HOSTS, T0)
    cluster.before_write.append(theirs.secret_data())
    rotator = cluster.rotator([T0])
    assert await rotator.sync() is Action.REUSE
    assert rotator.serving == theirs
    assert cluster.writes == 0
    assert cluster.loaded == [theirs.cert]


async def test_rotator_picks_up_certs_another_replica_rotated() -> None:
    cluster = FakeCluster()
    clock = [T0]
    rotator = cluster.rotator(clock)
    await rotator.sync()
    replacement = generate_bundle(HOSTS, T0)
    cluster.secret = dict(replacement.secret_data())
    cluster.version += 1
    assert await rotator.sync() is Action.REUSE
    assert cluster.loaded[-1] == replacement.cert
    assert rotator.serving == replacement


async def test_unmanaged_certificates_are_only_watched(bundle: CertBundle) -> None:
    files: list[tuple[bytes, bytes] | None] = [None]
    loaded: list[bytes] = []

    async def read_files() -> tuple[bytes, bytes] | None:
        return files[0]

    rotator = CertRotator(
        hosts=HOSTS,
        manage=False,
        read_files=read_files,
        reload=lambda cert, key: loaded.append(cert),
    )
    assert rotator.interval == timedelta(seconds=10)
    with pytest.raises(FileNotFoundError):
        await rotator.sync()
    assert not rotator.is_ready()
    files[0] = (bundle.cert, bundle.key)
    await rotator.sync()
    await rotator.sync()
    assert rotator.is_ready()
    assert loaded == [bundle.cert]
    other = generate_bundle(HOSTS, T0)
    files[0] = (other.cert, other.key)
    await rotator.sync()
    assert loaded == [bundle.cert, other.cert]


def test_rotator_needs_its_callables() -> None:
    with pytest.raises(ValueError, match="read_secret and write_secret"):
        CertRotator(hosts=HOSTS, reload=lambda c, k: None)
    with pytest.raises(ValueError, match="read_files"):
        CertRotator(hosts=HOSTS, reload=lambda c, k: None, manage=False)


async def test_run_checks_periodically_and_retries_failures() -> None:
    cluster = FakeCluster()
    stop = asyncio.Event()
    reads = 0
    inner = cluster.read_secret

    async def flaky_read() -> SecretState | None:
        nonlocal reads
        reads += 1
        if reads == 1:
            raise ConnectionError("apiserver down")
        if reads == 4:
            stop.set()
        return await inner()

    rotator = CertRotator(
        hosts=HOSTS,
        reload=cluster.reload,
        read_secret=flaky_read,
        write_secret=cluster.write_secret,
        interval=timedelta(milliseconds=1),
        retry_interval=timedelta(milliseconds=1),
    )
    await asyncio.wait_for(rotator.run(stop), 10)
    assert reads == 4
    assert rotator.is_ready()
    assert cluster.writes == 1
