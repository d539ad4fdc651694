"""A Flight client whose every call is signed with the TrainJob's data-cache credential and
whose every answer is used only once the server has proved it holds the same credential
(:mod:`~trainer.datacache.auth`; docs/data-cache.md, "Security").

pyarrow gives a call's response headers only to client middleware, which cannot fail the
call; so the middleware here collects the ``x-data-cache-proof`` values it sees, and each
method checks, once its call has returned (for DoGet: once every batch is read, before a row
is handed back), that the proof of *its* call arrived. A proof is bound to its call's random
nonce, so concurrent calls never take each other's.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pyarrow.flight as fl

from trainer.datacache import auth

MAX_PENDING = 4096  # unclaimed proofs kept at most (a server sending junk proofs)


class ServerNotProven(fl.FlightUnauthenticatedError):  # type: ignore[misc]
    """The server answered without proving it holds the credential: its answer is unused."""


class _Proofs(fl.ClientMiddlewareFactory):  # type: ignore[misc]
    """Collects the proofs servers send back, for the calls to claim."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()

    def start_call(self, info: Any) -> _ProofReader:
        return _ProofReader(self)

    def add(self, value: str) -> None:
        with self._lock:
            if len(self._seen) >= MAX_PENDING:
                self._seen.clear()
            self._seen.add(value)

    def claim(self, value: str) -> bool:
        with self._lock:
            if value in self._seen:
                self._seen.discard(value)
                return True
            return False


class _ProofReader(fl.ClientMiddleware):  # type: ignore[misc]
    def __init__(self, proofs: _Proofs) -> None:
        super().__init__()
        self._proofs = proofs

    def received_headers(self, headers: dict[str, Any]) -> None:
        for value in headers.get(auth.HEADER_PROOF, []):
            self._proofs.add(value.decode() if isinstance(value, bytes) else str(value))


class SignedClient:
    """One Flight server, called with signed requests (module docstring)."""

    def __init__(self, location: str, key: bytes) -> None:
        self.location = location
        self._key = key
        self._proofs = _Proofs()
        self._client = fl.FlightClient(location, middleware=[self._proofs])

    def _options(self, method: str, request: bytes, timeout: float | None) -> tuple[Any, str]:
        call = auth.sign(self._key, method, request)
        headers = [(auth.HEADER_CALL.encode(), call.encode())]
        return fl.FlightCallOptions(timeout=timeout, headers=headers), call

    def _check(self, method: str, call: str) -> None:
        if not self._proofs.claim(auth.proof(self._key, call)):
            raise ServerNotProven(
                f"the server at {self.location} answered {method} without proving it holds "
                "this TrainJob's data-cache credential: it is not this TrainJob's cache, so "
                "its answer is not used"
            )

    def list_flights(self, timeout: float | None = None) -> list[Any]:
        options, call = self._options("ListFlights", b"", timeout)
        infos = list(self._client.list_flights(options=options))
        self._check("ListFlights", call)
        return infos

    def get_flight_info(self, descriptor: Any, timeout: float | None = None) -> Any:
        options, call = self._options("GetFlightInfo", descriptor.serialize(), timeout)
        info = self._client.get_flight_info(descriptor, options)
        self._check("GetFlightInfo", call)
        return info

    def get_schema(self, descriptor: Any, timeout: float | None = None) -> Any:
        options, call = self._options("GetSchema", descriptor.serialize(), timeout)
        result = self._client.get_schema(descriptor, options)
        self._check("GetSchema", call)
        return result

    def read(self, ticket: Any, timeout: float | None = None) -> Any:
        """DoGet, read to the end: a pyarrow Table."""
        options, call = self._options("DoGet", ticket.serialize(), timeout)
        table = self._client.do_get(ticket, options).read_all()
        self._check("DoGet", call)
        return table

    def do_action(self, action: Any, timeout: float | None = None) -> list[Any]:
        options, call = self._options("DoAction", action.serialize(), timeout)
        results = list(self._client.do_action(action, options))
        self._check("DoAction", call)
        return results

    def wait_for_available(self, timeout: float) -> None:
        """Until the server answers a signed ListFlights (and proves itself), retrying while
        it is unreachable or loading (UNAVAILABLE) for up to ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.list_flights(timeout=max(deadline - time.monotonic(), 0.5))
                return
            except fl.FlightUnavailableError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.025)

    def close(self) -> None:
        self._client.close()
