"""Webhook serving certificates as data: generation, inspection and the rotation decision,
pure functions over PEM bytes and an explicit ``now`` (key and serial randomness aside).

Upstream uses open-policy-agent's cert-controller: a self-signed CA (10 years; its name is the
caller's, a :class:`CAName`), a serving certificate for
``<service>.<namespace>.svc`` (1 year), both stored in a Secret (keys ``ca.crt``, ``ca.key``,
``tls.crt``, ``tls.key``), checked every 12 h and rotated 90 days before expiry. This module
decides what to do (:func:`plan`) and produces the certificates; :mod:`webhooks.certs` does it
(files, the Secret, the live TLS context).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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

DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"


# ---------------------------------------------------------------------------------------------
# Generation (pure apart from key and serial randomness)


@dataclass(frozen=True)
class CAName:
    """The subject of a generated CA: its common name and organisation."""

    common_name: str
    organization: str


ANONYMOUS_CA = CAName("webhook-ca", "webhook")
"""The CA name where the caller gives none."""


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
    name: CAName = ANONYMOUS_CA,
    validity: timedelta = CA_VALIDITY,
) -> tuple[bytes, bytes]:
    """A self-signed CA certificate and its key, as PEM (certificate, key)."""
    key = _new_key()
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, name.common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, name.organization),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
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
    ca_name: CAName = ANONYMOUS_CA,
) -> CertBundle:
    """A serving certificate for ``hosts``, signed by ``ca`` (PEM cert, key) or by a new CA
    named ``ca_name``."""
    ca_cert, ca_key = ca if ca is not None else generate_ca(now, name=ca_name, validity=ca_validity)
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
    ca_name: CAName = ANONYMOUS_CA,
) -> tuple[Action, CertBundle]:
    """Apply :func:`plan`: the bundle to serve (the stored one, or a regenerated one, a new CA
    named ``ca_name``)."""
    action = plan(stored, hosts, now, before)
    if action is Action.REUSE and stored is not None:
        return action, stored
    if action is Action.NEW_CERT and stored is not None:
        return action, generate_bundle(hosts, now, ca=(stored.ca_cert, stored.ca_key))
    return Action.NEW_CA, generate_bundle(hosts, now, ca_name=ca_name)


def ca_bundle_for(new: CertBundle, previous: CertBundle | None, now: datetime) -> bytes:
    """The caBundle to inject: the new CA, plus the previous CA while it is still valid, so
    replicas still serving a certificate of the old CA stay trusted until they reload."""
    out = new.ca_cert
    if previous is not None and previous.ca_cert != new.ca_cert:
        old = load_cert(previous.ca_cert)
        if old is not None and old.not_valid_after_utc > now:
            out = new.ca_cert.rstrip(b"\n") + b"\n" + previous.ca_cert
    return out
