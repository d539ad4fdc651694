"""The test bed's certificates and keys, made fresh for every bed (docs/testbed.md).

A cluster CA signs kube-apiserver's serving certificate and the client certificates of the
admin, kube-controller-manager, kube-scheduler and KWOK, as kubeadm lays them out; a second CA
is the front proxy's (kube-apiserver's client to aggregated APIs, Kueue's visibility API); an
RSA key pair signs and checks service-account tokens.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID = datetime.timedelta(days=2)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


class Authority:
    """A CA that writes the certificates it signs into one folder."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.name = name
        self._key = _key()
        now = datetime.datetime.now(datetime.UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.pair = Pair(folder / f"{name}.crt", folder / f"{name}.key")
        self.pair.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self._key, self.pair.key)

    def issue(
        self,
        file: str,
        common_name: str,
        groups: tuple[str, ...] = (),
        hosts: tuple[str, ...] = (),
    ) -> Pair:
        """A leaf certificate: for a client when no hosts are given, else for a server."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        names = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
        names += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        usage = ExtendedKeyUsageOID.SERVER_AUTH if hosts else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(names))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if hosts:
            alt: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    alt.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = Pair(self.folder / f"{file}.crt", self.folder / f"{file}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair


@dataclass(frozen=True)
class ClusterPKI:
    ca: Pair
    front_proxy_ca: Pair
    apiserver: Pair
    front_proxy_client: Pair
    admin: Pair
    controller_manager: Pair
    scheduler: Pair
    kwok: Pair
    node_agent: Pair
    """Node ``agent-0``'s credentials, as a kubelet's (tests/cluster/test_node_agent.py)."""
    sa_key: Path
    sa_pub: Path


def make_pki(folder: Path) -> ClusterPKI:
    folder.mkdir(parents=True, exist_ok=True)
    ca = Authority(folder, "ca")
    front = Authority(folder, "front-proxy-ca")
    hosts = (
        "127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
        "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
    )  # fmt: skip
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_key, sa_pub = folder / "sa.key", folder / "sa.pub"
    _write_key(sa, sa_key)
    sa_pub.write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ClusterPKI(
        ca=ca.pair,
        front_proxy_ca=front.pair,
        apiserver=ca.issue("apiserver", "kube-apiserver", hosts=hosts),
        front_proxy_client=front.issue("front-proxy-client", "front-proxy-client"),
        admin=ca.issue("admin", "kubernetes-admin", groups=("system:masters",)),
        controller_manager=ca.issue("controller-manager", "system:kube-controller-manager"),
        scheduler=ca.issue("scheduler", "system:kube-scheduler"),
        # KWOK stands in for the kubelets of many nodes; kwokctl gives it the admin's rights.
        kwok=ca.issue("kwok", "kwok-controller", groups=("system:masters",)),
        # Our node agent as the Node authorizer and NodeRestriction see a kubelet.
        node_agent=ca.issue("node-agent-0", "system:node:agent-0", groups=("system:nodes",)),
        sa_key=sa_key,
        sa_pub=sa_pub,
    )
