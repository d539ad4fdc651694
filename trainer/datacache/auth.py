"""Who may talk to the data cache: every Flight call is signed with the TrainJob's credential,
and every answer carries the server's proof that it holds the same credential
(docs/data-cache.md, "Security"). Standard library only: the signing and checking here are
pure functions of bytes, so the Flight layers on both sides (:mod:`~trainer.datacache.signed`,
:mod:`~trainer.datacache.server`) stay thin.

The credential is a random string the controller generates per TrainJob and keeps in the
Secret ``<job>-data-cache-auth``, mounted into the cache pods and the trainer pods; the file's
path is ``$DATA_CACHE_CREDENTIAL_FILE``. It never travels on the wire: a call carries

    ``x-data-cache-auth: v1 <unix time> <nonce> <mac>``

where ``mac`` is HMAC-SHA256 under the credential of the method, the time, a fresh random
nonce and the SHA-256 of the request message. The server recomputes it and compares in
constant time (:func:`hmac.compare_digest`), refuses a time more than :data:`WINDOW` seconds
from its clock and a nonce it has seen (a replayed call), and answers with

    ``x-data-cache-proof: <HMAC-SHA256 under the credential of the call's mac>``

which the client checks before it uses the answer: only a holder of the credential can make
it, and it is bound to this call's nonce. Why not a bearer token: a client that reached the
wrong server (a listener on a port the cache no longer holds, an address an attacker
registered) would hand that server the token itself; here it hands over one signature, good
only for the one request it signs, within :data:`WINDOW`, and only until the real server has
seen it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path

ENV_CREDENTIAL_FILE = "DATA_CACHE_CREDENTIAL_FILE"
HEADER_CALL = "x-data-cache-auth"
HEADER_PROOF = "x-data-cache-proof"
VERSION = "v1"
WINDOW = 300.0
"""Seconds a signed call stays valid either side of the server's clock."""
MIN_CREDENTIAL = 16
MAX_CREDENTIAL = 4096
NONCE_BYTES = 16

_CALL = b"trainer-data-cache/v1/call\n"
_PROOF = b"trainer-data-cache/v1/server\n"

Clock = Callable[[], float]


class CredentialError(ValueError):
    """The credential file is missing, unreadable or not a credential; the message says so."""


class Unauthenticated(Exception):
    """A call the server refuses, or an answer the client refuses; the message says why."""


def read_credential(path: str | Path) -> bytes:
    """The credential in ``path`` (surrounding whitespace dropped)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CREDENTIAL + 1)
    except OSError as exc:
        raise CredentialError(
            f"cannot read the data-cache credential {path}: {exc.strerror or exc}"
        ) from exc
    if len(raw) > MAX_CREDENTIAL:
        raise CredentialError(
            f"the data-cache credential {path} is longer than {MAX_CREDENTIAL} bytes: "
            "not a credential file"
        )
    key = raw.strip()
    if len(key) < MIN_CREDENTIAL:
        raise CredentialError(
            f"the data-cache credential {path} holds {len(key)} bytes; at least "
            f"{MIN_CREDENTIAL} are needed (the controller's Secret holds 43)"
        )
    return key


def credential_from_env(env: Mapping[str, str] | None = None) -> bytes:
    """The credential named by ``$DATA_CACHE_CREDENTIAL_FILE``."""
    path = (env if env is not None else os.environ).get(ENV_CREDENTIAL_FILE, "")
    if not path:
        raise CredentialError(
            f"{ENV_CREDENTIAL_FILE} is not set: it names the file holding the TrainJob's "
            "data-cache credential (the controller mounts the Secret <job>-data-cache-auth "
            'into the cache and trainer pods and sets it; docs/data-cache.md, "Security")'
        )
    return read_credential(path)


def _mac(key: bytes, method: str, stamp: str, nonce: str, request: bytes) -> str:
    message = b"\n".join(
        [method.encode(), stamp.encode(), nonce.encode(), hashlib.sha256(request).digest()]
    )
    return hmac.new(key, _CALL + message, hashlib.sha256).hexdigest()


def sign(key: bytes, method: str, request: bytes, *, now: float | None = None) -> str:
    """The ``x-data-cache-auth`` value for one call of ``method`` with ``request`` (the
    serialized request message)."""
    stamp = str(int(time.time() if now is None else now))
    nonce = secrets.token_hex(NONCE_BYTES)
    return f"{VERSION} {stamp} {nonce} {_mac(key, method, stamp, nonce, request)}"


def proof(key: bytes, call: str) -> str:
    """The server's answer to the signed call ``call`` (an ``x-data-cache-auth`` value)."""
    mac = call.rpartition(" ")[2]
    return hmac.new(key, _PROOF + mac.encode(), hashlib.sha256).hexdigest()


def proves(key: bytes, call: str, answer: str | None) -> bool:
    """Whether ``answer`` (an ``x-data-cache-proof`` value) is the proof for ``call``."""
    if not answer:
        return False
    return hmac.compare_digest(proof(key, call).encode(), answer.encode())


class Verifier:
    """The server's check of signed calls, with the nonces it has seen (kept until their
    time can no longer pass the window, so a replay within it is refused)."""

    def __init__(self, key: bytes, *, clock: Clock = time.time, window: float = WINDOW) -> None:
        if len(key) < MIN_CREDENTIAL:
            raise CredentialError(f"a data-cache credential needs {MIN_CREDENTIAL} bytes")
        self._key = key
        self._clock = clock
        self._window = window
        self._seen: OrderedDict[str, float] = OrderedDict()  # nonce -> when to forget it
        self._lock = threading.Lock()

    def check(self, method: str, request: bytes, header: str | None) -> str:
        """The proof to answer a good call with; raises :class:`Unauthenticated` saying why
        the call is refused."""
        if not header:
            raise Unauthenticated(
                f"this call carries no data-cache credential (header {HEADER_CALL}): the "
                "cache answers only the pods of its own TrainJob, which sign their calls with "
                f'the credential in ${ENV_CREDENTIAL_FILE} (docs/data-cache.md, "Security")'
            )
        parts = header.split(" ")
        if len(parts) != 4 or parts[0] != VERSION or not parts[1].isdigit():
            raise Unauthenticated(
                f"the {HEADER_CALL} header is malformed: expected '{VERSION} <unix time> "
                "<nonce> <mac>' (sign calls with trainer.datacache.client)"
            )
        _, stamp, nonce, mac = parts
        now = self._clock()
        skew = int(stamp) - now
        if abs(skew) > self._window:
            raise Unauthenticated(
                f"the call was signed {abs(skew):.0f} s {'after' if skew > 0 else 'before'} "
                f"the cache's clock (more than {self._window:.0f} s): a replayed call, or "
                "clocks that disagree"
            )
        expected = _mac(self._key, method, stamp, nonce, request)
        if not hmac.compare_digest(expected.encode(), mac.encode()):
            raise Unauthenticated(
                "the call's data-cache credential is wrong: it was not signed with this "
                "TrainJob's credential (or not for this request)"
            )
        with self._lock:
            while self._seen and next(iter(self._seen.values())) < now:
                self._seen.popitem(last=False)
            if nonce in self._seen:
                raise Unauthenticated("this call was already made once: a replay is refused")
            self._seen[nonce] = now + 2 * self._window
        return proof(self._key, header)
