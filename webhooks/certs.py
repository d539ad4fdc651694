"""Webhook serving certificates: generation, rotation decisions, files and a reloadable TLS
context (spec 6.3).

Upstream uses open-policy-agent's cert-controller: a self-signed CA ``kubeflow-trainer-ca``
(organisation ``kubeflow-trainer``, 10 years), a serving certificate for
``<service>.<namespace>.svc`` (1 year), both stored in a Secret (keys ``ca.crt``, ``ca.key``,
``tls.crt``, ``tls.key``), written to the cert directory, and the CA injected as ``caBundle``
into the two webhook configurations; checked every 12 h and rotated 90 days before expiry.

This module has the same behaviour in three layers:

* pure functions over PEM bytes and an explicit ``now`` (:func:`generate_ca`,
  :func:`generate_serving_cert`, :func:`needs_rotation`, :func:`plan`);
* :class:`CertRotator`, the loop, with every side effect (read/write the Secret, inject the
  caBundle, write files, reload TLS) injected as a callable, so the Kubernetes side plugs in
  without this module importing a client;
* :class:`ServerTLS`, an ``ssl.SSLContext`` whose certificate can be swapped while the server
  runs: new handshakes use the new certificate, open connections keep theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger(__name__)

CA_COMMON_NAME = "kubeflow-trainer-ca"
CA_ORGANIZATION = "kubeflow-trainer"
CA_VALIDITY = timedelta(days=3650)
CERT_VALIDITY = timedelta(days=365)
ROTATE_BEFORE = timedelta(days=90)
CHECK_INTERVAL = timedelta(hours=12)
#: Certificates start an hour in the past so that replicas with skewed clocks accept them
#: (cert-controller does the same).
BACKDATE = timedelta(hours=1)

# Secret keys and file names.
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
TLS_CERT = "tls.crt"
TLS_KEY = "tls.key"

DEFAULT_SERVICE = "kubeflow-trainer-controller-manager"
DEFAULT_SECRET = "kubeflow-trainer-webhook-cert"
DEFAULT_NAMESPACE = "kubeflow-system"
DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"


# ---------------------------------------------------------------------------------------------
# Generation (pure apart from key and serial randomness)


@dataclass(frozen=True)
class CertBundle:
    """A CA and a serving certificate signed by it, all PEM."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    def secret_data(self) -> dict[str, bytes]:
        """The Secret's data (cert-controller's four keys)."""
        return {CA_CERT: self.ca_cert, CA_KEY: self.ca_key, TLS_CERT: self.cert, TLS_KEY: self.key}

    @classmethod
    def from_secret_data(cls, data: Mapping[str, bytes] | None) -> CertBundle | None:
        """The bundle held by a Secret's data, or None when a key is missing or empty."""
        if not data:
            return None
        values = [data.get(k) for k in (CA_CERT, CA_KEY, TLS_CERT, TLS_KEY)]
        if not all(values):
            return None
        ca_cert, ca_key, cert, key = (bytes(v) for v in values if v)
        return cls(ca_cert, ca_key, cert, key)


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names a Service is reached by inside the cluster, most specific first."""
    return [f"{service}.{namespace}.svc", f"{service}.{namespace}", service]


def _new_key() -> ec.EllipticCurvePrivateKey:
    # ECDSA P-256: generated in microseconds and cheap per handshake; every Kubernetes API
    # server and TLS client accepts it.
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: CertificateIssuerPrivateKeyTypes) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def generate_ca(
    now: datetime,
    *,
    common_name: str = CA_COMMON_NAME,
    organization: str = CA_ORGANIZATION,
    validity: timedelta = CA_VALIDITY,
) -> tuple[bytes, bytes]:
    """A self-signed CA certificate and its key, as PEM (certificate, key)."""
    key = _new_key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return _cert_pem(cert), _key_pem(key)


def _split_hosts(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def generate_serving_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    hosts: Sequence[str],
    now: datetime,
    *,
    validity: timedelta = CERT_VALIDITY,
) -> tuple[bytes, bytes]:
    """A serving certificate for ``hosts`` (DNS names or IP addresses: each becomes a DNS or IP
    SAN; the first is also the common name), signed by the CA. Returns PEM (certificate, key).
    """
    if not hosts:
        raise ValueError("a serving certificate needs at least one host name")
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("the CA key must be an ECDSA or RSA private key")
    key = _new_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(_split_hosts(hosts)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return _cert_pem(cert), _key_pem(key)


def generate_bundle(
    hosts: Sequence[str],
    now: datetime,
    *,
    ca: tuple[bytes, bytes] | None = None,
    ca_validity: timedelta = CA_VALIDITY,
    cert_validity: timedelta = CERT_VALIDITY,
) -> CertBundle:
    """A serving certificate for ``hosts``, signed by ``ca`` (PEM cert, key) or by a new CA."""
    ca_cert, ca_key = ca if ca is not None else generate_ca(now, validity=ca_validity)
    cert, key = generate_serving_cert(ca_cert, ca_key, hosts, now, validity=cert_validity)
    return CertBundle(ca_cert, ca_key, cert, key)


# ---------------------------------------------------------------------------------------------
# Decisions (pure)


def load_cert(cert_pem: bytes) -> x509.Certificate | None:
    """The first certificate of a PEM blob, or None when it does not parse."""
    try:
        return x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return None


def needs_rotation(cert_pem: bytes, now: datetime, before: timedelta = ROTATE_BEFORE) -> bool:
    """Whether a certificate must be replaced at ``now``: it does not parse, is not valid yet,
    or expires within ``before``."""
    cert = load_cert(cert_pem)
    if cert is None:
        return True
    return now < cert.not_valid_before_utc or now + before >= cert.not_valid_after_utc


def serial_of(cert_pem: bytes) -> int | None:
    """The serial number of a PEM certificate (None when it does not parse)."""
    cert = load_cert(cert_pem)
    return cert.serial_number if cert else None


def covers_host(cert: x509.Certificate, host: str) -> bool:
    """Whether ``host`` (a DNS name, matched exactly, case-insensitively, or an IP address) is
    among the certificate's subject alternative names."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host.lower() in (n.lower() for n in san.get_values_for_type(x509.DNSName))
    return ip in san.get_values_for_type(x509.IPAddress)


def ca_usable(ca_cert_pem: bytes, ca_key_pem: bytes, now: datetime, before: timedelta) -> bool:
    """Whether a CA may keep signing: it parses, is a CA, is not due, and the key is its key."""
    cert = load_cert(ca_cert_pem)
    if cert is None or needs_rotation(ca_cert_pem, now, before):
        return False
    try:
        if not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            return False
        key = serialization.load_pem_private_key(ca_key_pem, password=None)
    except (ValueError, TypeError, x509.ExtensionNotFound):
        return False
    return _same_public_key(cert, key.public_key())


def _same_public_key(cert: x509.Certificate, public_key: object) -> bool:
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        return bool(cert.public_key().public_bytes(*fmt) == public_key.public_bytes(*fmt))  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def serving_cert_usable(
    bundle: CertBundle, hosts: Sequence[str], now: datetime, before: timedelta
) -> bool:
    """Whether the bundle's serving certificate can be kept: signed by the bundle's CA, its key
    matches, it names every host, and it is not due for rotation."""
    cert = load_cert(bundle.cert)
    ca = load_cert(bundle.ca_cert)
    if cert is None or ca is None or needs_rotation(bundle.cert, now, before):
        return False
    try:
        cert.verify_directly_issued_by(ca)
        key = serialization.load_pem_private_key(bundle.key, password=None)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return _same_public_key(cert, key.public_key()) and all(covers_host(cert, h) for h in hosts)


class Action(Enum):
    """What the rotator does with the certificates it found."""

    REUSE = "reuse"
    """The stored bundle is good: serve it."""
    NEW_CERT = "new-cert"
    """The CA is good, the serving certificate is not: sign a new one with the same CA (the
    caBundle the API server trusts does not change)."""
    NEW_CA = "new-ca"
    """The CA is missing, unusable or due: a new CA and a new serving certificate."""


def plan(
    stored: CertBundle | None,
    hosts: Sequence[str],
    now: datetime,
    before: timedelta = ROTATE_BEFORE,
) -> Action:
    """Decide, from the stored bundle alone, whether to reuse it or what to regenerate."""
    if stored is None or not ca_usable(stored.ca_cert, stored.ca_key, now, before):
        return Action.NEW_CA
    if not serving_cert_usable(stored, hosts, now, before):
        return Action.NEW_CERT
    return Action.REUSE


def rotate(
    stored: CertBundle | None,
    hosts: Sequence[str],
    now: datetime,
    before: timedelta = ROTATE_BEFORE,
) -> tuple[Action, CertBundle]:
    """Apply :func:`plan`: the bundle to serve (the stored one, or a regenerated one)."""
    action = plan(stored, hosts, now, before)
    if action is Action.REUSE and stored is not None:
        return action, stored
    if action is Action.NEW_CERT and stored is not None:
        return action, generate_bundle(hosts, now, ca=(stored.ca_cert, stored.ca_key))
    return Action.NEW_CA, generate_bundle(hosts, now)


def ca_bundle_for(new: CertBundle, previous: CertBundle | None, now: datetime) -> bytes:
    """The caBundle to inject: the new CA, plus the previous CA while it is still valid, so
    replicas still serving a certificate of the old CA stay trusted until they reload."""
    out = new.ca_cert
    if previous is not None and previous.ca_cert != new.ca_cert:
        old = load_cert(previous.ca_cert)
        if old is not None and old.not_valid_after_utc > now:
            out = new.ca_cert.rstrip(b"\n") + b"\n" + previous.ca_cert
    return out


# ---------------------------------------------------------------------------------------------
# Files


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_cert_dir(directory: str | os.PathLike[str], bundle: CertBundle) -> None:
    """Write ``tls.crt``, ``tls.key`` and ``ca.crt`` into ``directory``, each atomically (a
    temporary file in the same directory, then rename), so a reader never sees half a file.

    The key is written before the certificate, and the CA last. A reader that catches the
    moment between two renames finds a key that does not match the certificate;
    :meth:`ServerTLS.reload` refuses such a pair and keeps serving the old one, and the next
    check loads the consistent pair. The CA key never goes to disk.
    """
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    _atomic_write(root / TLS_KEY, bundle.key, 0o600)
    _atomic_write(root / TLS_CERT, bundle.cert, 0o644)
    _atomic_write(root / CA_CERT, bundle.ca_cert, 0o644)


def read_cert_dir(directory: str | os.PathLike[str]) -> tuple[bytes, bytes] | None:
    """The (certificate, key) PEM of a cert directory, or None when either file is missing."""
    root = Path(directory)
    try:
        return (root / TLS_CERT).read_bytes(), (root / TLS_KEY).read_bytes()
    except FileNotFoundError:
        return None


# ---------------------------------------------------------------------------------------------
# TLS


_TLS_VERSIONS: Mapping[str, ssl.TLSVersion] = {
    "1.0": ssl.TLSVersion.TLSv1,
    "1.1": ssl.TLSVersion.TLSv1_1,
    "1.2": ssl.TLSVersion.TLSv1_2,
    "1.3": ssl.TLSVersion.TLSv1_3,
}


def tls_version(text: str) -> ssl.TLSVersion:
    """``tls.minVersion`` of the Configuration (``"1.0"``..``"1.3"``, or ``VersionTLS12``)."""
    key = text.removeprefix("VersionTLS").removeprefix("TLS").strip()
    if len(key) == 2 and key.isdigit():
        key = f"{key[0]}.{key[1]}"
    try:
        return _TLS_VERSIONS[key]
    except KeyError:
        raise ValueError(f"unsupported TLS version {text!r}: accepted 1.0, 1.1, 1.2, 1.3") from None


PemOrPath = bytes | str | os.PathLike[str]


class ServerTLS:
    """A server ``ssl.SSLContext`` whose certificate can be replaced while serving.

    The context object stays the same for the life of the server, and
    :meth:`reload` calls ``load_cert_chain`` on it. OpenSSL copies the certificate and key from
    the context into each connection when the connection is created, so every handshake after
    a reload presents the new certificate and connections already open keep the old one. Call
    :meth:`reload` on the event-loop thread that serves the context: the swap of certificate
    and key is then never observed half-done by a handshake.
    """

    def __init__(
        self,
        *,
        min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2,
        ciphers: str | None = None,
        alpn_protocols: Sequence[str] = ("http/1.1",),
    ) -> None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = min_version
        ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
        if ciphers:
            ctx.set_ciphers(ciphers)
        if alpn_protocols:
            ctx.set_alpn_protocols(list(alpn_protocols))
        self.context = ctx
        self.serial: int | None = None
        """Serial number of the certificate being served (None until the first load)."""
        self.cert_pem: bytes | None = None

    @property
    def loaded(self) -> bool:
        """Whether a certificate has been loaded (the server can complete handshakes)."""
        return self.cert_pem is not None

    def reload(self, cert: PemOrPath, key: PemOrPath) -> bool:
        """Serve ``cert``/``key`` (PEM bytes or file paths) from the next handshake on.

        Returns False, leaving the current certificate in place, when it is the one already
        served. Raises ``ssl.SSLError``/``ValueError`` when the pair is unusable (unreadable,
        or the key does not match); the context then still serves the previous pair, because
        it is first checked on a scratch context.
        """
        cert_pem = cert if isinstance(cert, bytes) else Path(cert).read_bytes()
        key_pem = key if isinstance(key, bytes) else Path(key).read_bytes()
        if cert_pem == self.cert_pem:
            return False
        with tempfile.TemporaryDirectory(prefix="trainer-tls-") as tmp:
            cert_file = Path(tmp, TLS_CERT)
            key_file = Path(tmp, TLS_KEY)
            cert_file.write_bytes(cert_pem)
            key_file.touch(mode=0o600)
            key_file.write_bytes(key_pem)
            # Check the pair on a scratch context first: a failed load_cert_chain on the live
            # context could leave it with a certificate and no matching key.
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_file, key_file)
            self.context.load_cert_chain(cert_file, key_file)
        self.cert_pem = cert_pem
        self.serial = serial_of(cert_pem)
        log.info("webhook serving certificate loaded serial=%x", self.serial or 0)
        return True


# ---------------------------------------------------------------------------------------------
# The rotator


@dataclass(frozen=True)
class SecretState:
    """What the rotator reads of its Secret: the data and the version to write against."""

    data: Mapping[str, bytes]
    version: str | None = None
    """The Secret's resourceVersion (optimistic concurrency between replicas)."""


ReadSecret = Callable[[], Awaitable[SecretState | None]]
WriteSecret = Callable[[Mapping[str, bytes], str | None], Awaitable[bool]]
"""Store the data; ``version`` is what was read (None: the Secret did not exist). Returns False
when another writer got there first (a conflict): the rotator re-reads and uses theirs."""
InjectCABundle = Callable[[bytes], Awaitable[None]]
WriteFiles = Callable[[CertBundle], Awaitable[None]]
ReadFiles = Callable[[], Awaitable[tuple[bytes, bytes] | None]]
Reload = Callable[[bytes, bytes], object]


class CertRotator:
    """Keeps the webhook's serving certificate valid, the Secret current and the API server
    trusting it.

    Managed (``manage=True``, upstream's default): on :meth:`sync`, read the Secret; reuse its
    bundle when the CA and serving certificate are valid, name the service and are not due for
    rotation; otherwise generate (a new serving certificate with the same CA, or everything
    anew) and write the Secret (on a conflict, re-read and use the winner's). Then write the
    files (when ``write_files`` is given; not when the Secret is mounted read-only), reload TLS
    when the certificate differs from the one served, and inject the caBundle when it changed.

    Unmanaged (``manage=False``, ``certManagement.enable: false``): certificates come from
    outside (a mounted Secret); :meth:`sync` only reads them with ``read_files`` and reloads
    TLS when they change.

    :meth:`run` syncs at start (retrying every ``retry_interval`` until it succeeds), then
    every ``interval`` (12 h managed, 10 s unmanaged by default) until ``stop`` is set.
    ``ready`` is set after the first successful sync: the readiness probe reports "certificates
    are not ready" until then.
    """

    def __init__(
        self,
        *,
        hosts: Sequence[str],
        reload: Reload,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        manage: bool = True,
        read_secret: ReadSecret | None = None,
        write_secret: WriteSecret | None = None,
        inject_ca_bundle: InjectCABundle | None = None,
        write_files: WriteFiles | None = None,
        read_files: ReadFiles | None = None,
        rotate_before: timedelta = ROTATE_BEFORE,
        interval: timedelta | None = None,
        retry_interval: timedelta = timedelta(seconds=5),
        generate: Callable[
            [CertBundle | None, Sequence[str], datetime, timedelta], tuple[Action, CertBundle]
        ] = rotate,
    ) -> None:
        if manage and (read_secret is None or write_secret is None):
            raise ValueError("managed certificates need read_secret and write_secret")
        if not manage and read_files is None:
            raise ValueError("externally provided certificates need read_files")
        self.hosts = list(hosts)
        self.manage = manage
        self._reload = reload
        self._now = now
        self._read_secret = read_secret
        self._write_secret = write_secret
        self._inject = inject_ca_bundle
        self._write_files = write_files
        self._read_files = read_files
        self.rotate_before = rotate_before
        self.interval = interval or (CHECK_INTERVAL if manage else timedelta(seconds=10))
        self.retry_interval = retry_interval
        self._generate = generate
        self.ready = asyncio.Event()
        self.serving: CertBundle | None = None
        self._served_cert: bytes | None = None
        self._injected: bytes | None = None
        self.last_action: Action | None = None

    def is_ready(self) -> bool:
        """For the readiness probe: certificates have been loaded."""
        return self.ready.is_set()

    async def sync(self) -> Action | None:
        """One check: make sure a valid certificate is stored, served and trusted. Returns
        what was done with the stored bundle (None in unmanaged mode)."""
        if not self.manage:
            await self._sync_files()
            return None
        action = await self._sync_secret()
        self.last_action = action
        return action

    async def _sync_files(self) -> None:
        assert self._read_files is not None
        pair = await self._read_files()
        if pair is None:
            raise FileNotFoundError("no certificate and key in the certificate directory yet")
        cert, key = pair
        if cert != self._served_cert:
            self._reload(cert, key)
            self._served_cert = cert
        self.ready.set()

    async def _sync_secret(self) -> Action:
        assert self._read_secret is not None and self._write_secret is not None
        previous: CertBundle | None = None
        for _ in range(5):
            state = await self._read_secret()
            stored = CertBundle.from_secret_data(state.data if state else None)
            previous = previous or stored
            action, bundle = self._generate(stored, self.hosts, self._now(), self.rotate_before)
            if action is not Action.REUSE:
                written = await self._write_secret(
                    bundle.secret_data(), state.version if state else None
                )
                if not written:
                    log.info("webhook certificate Secret changed concurrently; reading it again")
                    continue
                log.info(
                    "webhook certificates %s serial=%x",
                    "rotated (new CA)" if action is Action.NEW_CA else "rotated",
                    serial_of(bundle.cert) or 0,
                )
            await self._serve(bundle, previous)
            return action
        raise RuntimeError("the webhook certificate Secret kept changing under five writes")

    async def _serve(self, bundle: CertBundle, previous: CertBundle | None) -> None:
        if bundle.cert != self._served_cert:
            if self._write_files is not None:
                await self._write_files(bundle)
            self._reload(bundle.cert, bundle.key)
            self._served_cert = bundle.cert
        ca_bundle = ca_bundle_for(bundle, previous or self.serving, self._now())
        if self._inject is not None and ca_bundle != self._injected:
            await self._inject(ca_bundle)
            self._injected = ca_bundle
        self.serving = bundle
        self.ready.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Sync now and then every ``interval`` until ``stop`` is set. A failed sync is logged
        and retried after ``retry_interval``; the certificates being served stay in place."""
        while not stop.is_set():
            try:
                await self.sync()
                wait = self.interval
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("webhook certificate check failed; retrying")
                wait = self.retry_interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait.total_seconds())
