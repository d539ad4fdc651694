"""Webhook serving certificates: generation, rotation decisions, files and a reloadable TLS
context (docs/certificates.md).

Upstream uses open-policy-agent's cert-controller: a self-signed CA ``kubeflow-trainer-ca``
(organisation ``kubeflow-trainer``, 10 years), a serving certificate for
``<service>.<namespace>.svc`` (1 year), both stored in a Secret (keys ``ca.crt``, ``ca.key``,
``tls.crt``, ``tls.key``), written to the cert directory, and the CA injected as ``caBundle``
into the two webhook configurations; checked every 12 h and rotated 90 days before expiry.

The same behaviour in three layers:

* pure functions over PEM bytes and an explicit ``now`` (:func:`generate_ca`,
  :func:`generate_serving_cert`, :func:`needs_rotation`, :func:`plan`), in
  :mod:`trainer.machinery.certgen` and re-exported here;
* here: :class:`CertRotator`, the loop, with every side effect (read/write the Secret, inject the
  caBundle, write files, reload TLS) injected as a callable, so the Kubernetes side plugs in
  without this module importing a client;
* :class:`ServerTLS`, an ``ssl.SSLContext`` whose certificate can be swapped while the server
  runs: new handshakes use the new certificate, open connections keep theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from trainer.machinery.certgen import (
    BACKDATE,
    CA_CERT,
    CA_KEY,
    CA_VALIDITY,
    CERT_VALIDITY,
    CHECK_INTERVAL,
    DEFAULT_CERT_DIR,
    ROTATE_BEFORE,
    TLS_CERT,
    TLS_KEY,
    Action,
    CAName,
    CertBundle,
    ca_bundle_for,
    ca_usable,
    covers_host,
    generate_bundle,
    generate_ca,
    generate_serving_cert,
    load_cert,
    needs_rotation,
    plan,
    rotate,
    serial_of,
    service_dns_names,
    serving_cert_usable,
)
from trainer.machinery.files import write_file

# The Trainer's names, as upstream's cert-controller set-up gives them.
CA_COMMON_NAME = "kubeflow-trainer-ca"
CA_ORGANIZATION = "kubeflow-trainer"
TRAINER_CA = CAName(CA_COMMON_NAME, CA_ORGANIZATION)
DEFAULT_SERVICE = "kubeflow-trainer-controller-manager"
DEFAULT_SECRET = "kubeflow-trainer-webhook-cert"
DEFAULT_NAMESPACE = "kubeflow-system"


def rotate_trainer(
    stored: CertBundle | None, hosts: Sequence[str], now: datetime, before: timedelta
) -> tuple[Action, CertBundle]:
    """:func:`~trainer.machinery.certgen.rotate` with the Trainer's CA name."""
    return rotate(stored, hosts, now, before, ca_name=TRAINER_CA)


__all__ = [
    "BACKDATE",
    "CA_CERT",
    "CA_COMMON_NAME",
    "CA_KEY",
    "CA_ORGANIZATION",
    "CA_VALIDITY",
    "CERT_VALIDITY",
    "CHECK_INTERVAL",
    "DEFAULT_CERT_DIR",
    "DEFAULT_NAMESPACE",
    "DEFAULT_SECRET",
    "DEFAULT_SERVICE",
    "ROTATE_BEFORE",
    "TLS_CERT",
    "TLS_KEY",
    "TRAINER_CA",
    "Action",
    "CAName",
    "CertBundle",
    "CertRotator",
    "SecretState",
    "ServerTLS",
    "ca_bundle_for",
    "ca_usable",
    "covers_host",
    "generate_bundle",
    "generate_ca",
    "generate_serving_cert",
    "load_cert",
    "needs_rotation",
    "plan",
    "read_cert_dir",
    "rotate",
    "rotate_trainer",
    "serial_of",
    "service_dns_names",
    "serving_cert_usable",
    "tls_version",
    "write_cert_dir",
]

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Files


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
    write_file(root / TLS_KEY, bundle.key, 0o600)
    write_file(root / TLS_CERT, bundle.cert, 0o644)
    write_file(root / CA_CERT, bundle.ca_cert, 0o644)


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
        ] = rotate_trainer,
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
