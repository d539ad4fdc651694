"""The SSH key pair of an MPI job (trainer.plugins.mpi): what goes into ``<job>-mpi-ssh-auth``.

:func:`generate_ssh_keypair` is the one place in the build layer that uses randomness, so the
build never calls it itself: the caller (the controller, or ``trainer render``) hands it to the
build as :attr:`~trainer.runtime.info.BuildContext.ssh_keygen`, and the MPI plugin calls that
only when no Secret exists yet. Tests pass a deterministic fake instead.

The format matches upstream byte for byte in shape:

- a fresh ECDSA key on curve P-521 (upstream ``ecdsa.GenerateKey(elliptic.P521(), ...)``);
- the private key as an unencrypted PEM block of type ``EC PRIVATE KEY`` (the SEC 1 /
  "traditional OpenSSL" encoding of Go's ``x509.MarshalECPrivateKey`` + ``pem.EncodeToMemory``),
  which OpenSSH reads as an identity file;
- the public key as one OpenSSH ``authorized_keys`` line, ``ecdsa-sha2-nistp521 AAAA...``,
  **with** a trailing newline, because upstream's ``ssh.MarshalAuthorizedKey`` appends one. The
  Secret's ``ssh-publickey`` is mounted both as ``id_rsa.pub`` and as ``authorized_keys``, and
  the newline keeps the latter a well-formed one-line file.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from trainer.runtime.info import SSHKeyPair

KEY_TYPE = "ecdsa-sha2-nistp521"
"""The OpenSSH name of the key type :func:`generate_ssh_keypair` makes."""


def generate_ssh_keypair() -> SSHKeyPair:
    """A fresh ECDSA P-521 key pair: PEM ``EC PRIVATE KEY`` (unencrypted) and an
    ``authorized_keys`` line ending in a newline, as upstream writes them."""
    key = ec.generate_private_key(ec.SECP521R1())
    private_pem = key.private_bytes(
        encoding=Encoding.PEM,
        format=PrivateFormat.TraditionalOpenSSL,
        encryption_algorithm=NoEncryption(),
    )
    public_line = key.public_key().public_bytes(
        encoding=Encoding.OpenSSH, format=PublicFormat.OpenSSH
    )
    return SSHKeyPair(private_pem=private_pem, public_authorized_key=public_line + b"\n")
