"""TLS of the local API server: a CA and a serving certificate made fresh for each server.

Why TLS on loopback: kubectl (client-go) sends a bearer token only over HTTPS, and a server
certificate that names only loopback addresses also stops a page served under another name
(DNS rebinding) from completing a handshake with the server. Each :class:`~trainer.local.
apiserver.http.server.APIServer` makes its own CA (ECDSA P-256, kept in memory only) and a serving
certificate for ``localhost``, ``127.0.0.1`` and ``::1`` signed by it, with the same generator
the admission webhook uses (:mod:`trainer.machinery.certgen`). Clients trust the CA through the
kubeconfig's ``certificate-authority-data`` (:meth:`ServingTLS.ca_data`) or
:meth:`ServingTLS.client_context`. Nothing is written to disk except the CA certificate in the
kubeconfig; the keys live only in the server process (the serving key passes through a 0600
file in a private temporary directory for the moment ``load_cert_chain`` reads it, as the
``ssl`` module only loads keys from files).
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from trainer.machinery.certgen import CAName, generate_bundle, generate_ca

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
CA_NAME = "trainer-local-apiserver-ca"
CA_ORGANIZATION = "kubeflow-trainer-local"


class ServingTLS:
    """The CA and serving certificate of one server, and the SSL contexts built on them."""

    def __init__(self) -> None:
        now = datetime.now(UTC)
        ca = generate_ca(now, name=CAName(CA_NAME, CA_ORGANIZATION))
        bundle = generate_bundle(LOOPBACK_NAMES, now, ca=ca)
        self.ca_pem = bundle.ca_cert
        self._cert_pem = bundle.cert
        self._key_pem = bundle.key
        self._server: ssl.SSLContext | None = None

    def ca_data(self) -> str:
        """The CA certificate as a kubeconfig's ``certificate-authority-data`` (base64 PEM)."""
        return base64.b64encode(self.ca_pem).decode()

    def server_context(self) -> ssl.SSLContext:
        """The server side: TLS 1.2 or later, this server's certificate (made once)."""
        if self._server is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.options |= ssl.OP_NO_COMPRESSION
            ctx.set_alpn_protocols(["http/1.1"])
            with tempfile.TemporaryDirectory(prefix="trainer-apiserver-tls-") as tmp:
                cert, key = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
                cert.write_bytes(self._cert_pem)
                fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(self._key_pem)
                ctx.load_cert_chain(cert, key)
            self._server = ctx
        return self._server

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts this server's CA only (hostname checked)."""
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return ctx
