"""The data cache under attack (docs/data-cache.md, "Security"): another user of the
machine reached a cache that listened on every interface and answered anyone, read the whole
table, registered itself as cache pod 1 (last registration won) and so fed rank 1 its own rows.

Here every Flight call must be signed with the TrainJob's credential: unsigned and wrongly
signed calls are UNAUTHENTICATED, a registered pod cannot be replaced, and a reader uses no
answer from a server that cannot prove it holds the credential. The attack itself runs as a
second, unprivileged user (uid 65534, no groups: the attacker drops to it once pyarrow is
loaded) against real ``trainer data-cache serve``
processes on the host's loopback (as on a plane where no network sandbox can be made, or a
cluster where other pods reach the cache), while the legitimate reader still gets the real
rows.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from trainer.datacache import deps

MISSING = deps.available()
if MISSING is not None:
    pytest.skip(f"the data cache's extra is not installed: {MISSING}", allow_module_level=True)

import pyarrow as pa  # noqa: E402
import pyarrow.flight as fl  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from trainer.datacache.client import CacheClient, CacheClientError  # noqa: E402
from trainer.datacache.config import CacheConfig  # noqa: E402
from trainer.datacache.server import CacheServer  # noqa: E402
from trainer.datacache.signed import SignedClient  # noqa: E402
from trainer.local.executor.kubelet.grpc_probe import check_health  # noqa: E402

ROWS = 1000
CREDENTIAL = b"the-trainjobs-credential-0123456789abc"
OTHER = b"another-trainjobs-credential-987654321"
UNAUTHENTICATED = "FlightUnauthenticatedError"


def table() -> Any:
    return pa.table({"id": list(range(ROWS)), "amount": [i * 0.5 for i in range(ROWS)]})


@pytest.fixture
def parquet(tmp_path: Path) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(table(), path)
    return path


def config(source: Path, index: int = 0, peers: tuple[str, ...] = ()) -> CacheConfig:
    return CacheConfig("sales", "tx", source, None, index, peers, port=0)


class Impostor(fl.FlightServerBase):  # type: ignore[misc]
    """A Flight server that answers everyone with poisoned rows (``amount`` 1e6)."""

    def __init__(self) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self.poison = pa.table({"id": list(range(ROWS)), "amount": [1e6] * ROWS})

    def list_flights(self, context: Any, criteria: Any) -> Iterator[Any]:
        yield self.get_flight_info(context, fl.FlightDescriptor.for_path("sales", "tx"))

    def get_flight_info(self, context: Any, descriptor: Any) -> Any:
        endpoint = fl.FlightEndpoint(b"all", [])
        return fl.FlightInfo(self.poison.schema, descriptor, [endpoint], ROWS, -1)

    def do_get(self, context: Any, ticket: Any) -> Any:
        return fl.RecordBatchStream(self.poison)


@pytest.fixture
def head(parquet: Path) -> Iterator[CacheServer]:
    """Pod 0 of a cache of three pods sharing one address (the local plane's case), loaded."""
    server = CacheServer(config(parquet), CREDENTIAL, host="127.0.0.1")
    port = server.start()
    server.config = server.state.config = config(parquet, 0, (f"127.0.0.1:{port}",) * 3)
    server.load()
    try:
        yield server
    finally:
        server.stop(0)


def register(port: int, index: int, location: str, key: bytes = CREDENTIAL) -> None:
    body = {"index": index, "location": location, "total": ROWS}
    SignedClient(f"grpc://127.0.0.1:{port}", key).do_action(
        fl.Action("register", json.dumps(body).encode())
    )


# --- in one process ---------------------------------------------------------------------------


def test_unsigned_and_wrongly_signed_calls_are_unauthenticated(head: CacheServer) -> None:
    plain = fl.connect(f"grpc://127.0.0.1:{head.port}")
    descriptor = fl.FlightDescriptor.for_path("sales", "tx")
    ticket = fl.Ticket(json.dumps({"table": "sales/tx", "start": 0, "stop": 10}))
    action = fl.Action("register", b'{"index": 1, "location": "grpc://127.0.0.1:9", "total": 1}')
    calls: dict[str, Callable[[], object]] = {
        "ListFlights": lambda: list(plain.list_flights()),
        "GetFlightInfo": lambda: plain.get_flight_info(descriptor),
        "GetSchema": lambda: plain.get_schema(descriptor),
        "DoGet": lambda: plain.do_get(ticket).read_all(),
        "DoAction": lambda: list(plain.do_action(action)),
    }
    for name, call in calls.items():
        # pyarrow raises GetSchema's errors as a plain OSError: the message is what counts.
        kind = OSError if name == "GetSchema" else fl.FlightUnauthenticatedError
        with pytest.raises(kind, match="unauthenticated error, with message: this call carries "):
            call()
    with pytest.raises(fl.FlightUnauthenticatedError, match="credential is wrong"):
        SignedClient(f"grpc://127.0.0.1:{head.port}", OTHER).read(ticket)
    with pytest.raises(CacheClientError, match=r"do not share a credential: .*credential is wrong"):
        CacheClient(f"127.0.0.1:{head.port}", credential=OTHER, timeout=5)
    assert head.state.registered == {}
    assert (
        check_health(f"127.0.0.1:{head.port}", "", 2.0) is False
    )  # health answers anyone: still waiting


def test_a_registered_pod_cannot_be_replaced_nor_pointed_elsewhere(
    head: CacheServer, parquet: Path
) -> None:
    pod1 = f"grpc://127.0.0.1:{head.port + 1}"
    register(head.port, 1, pod1)
    register(head.port, 1, pod1)  # a retry of the same registration is fine
    # pyarrow raises ALREADY_EXISTS and INVALID_ARGUMENT as plain ArrowExceptions.
    refused = f"already exists error, with message: cache pod 1 is already registered at {pod1}"
    with pytest.raises(pa.ArrowException, match=re.escape(refused)):
        register(head.port, 1, "grpc://127.0.0.1:9")
    with pytest.raises(pa.ArrowException, match=r"a location must be grpc://127\.0\.0\.1:<port>"):
        register(head.port, 2, "grpc://10.1.2.3:50051")
    with pytest.raises(fl.FlightUnauthenticatedError, match="credential is wrong"):
        register(head.port, 2, "grpc://127.0.0.1:9", key=OTHER)
    assert head.state.registered == {1: pod1}


def test_a_reader_uses_no_answer_from_a_server_that_cannot_prove_the_credential(
    head: CacheServer,
) -> None:
    impostor = Impostor()
    try:
        with pytest.raises(CacheClientError, match="answered ListFlights without proving"):
            CacheClient(f"127.0.0.1:{impostor.port}", credential=CREDENTIAL, timeout=5)
        # Even a location pod 0 points at (here registered with the credential itself) is
        # read only once it proves itself: the impostor's rows never reach the reader.
        register(head.port, 1, f"grpc://127.0.0.1:{impostor.port}")
        register(head.port, 2, f"grpc://127.0.0.1:{impostor.port}")
        with CacheClient(f"127.0.0.1:{head.port}", credential=CREDENTIAL, timeout=5) as client:
            assert client.read_shard(0, 3).column("id").to_pylist() == list(range(333))
            with pytest.raises(CacheClientError, match="without proving it holds"):
                client.read_shard(2, 3)
    finally:
        impostor.shutdown()


# --- as another user, against `trainer data-cache serve` --------------------------------------

ATTACK = r"""
import json, os, secrets, sys, time
import pyarrow as pa, pyarrow.flight as fl

# Loaded as root, from a checkout uid 65534 may not be able to read (CI's is in a private
# temporary directory); everything below runs as uid 65534, no groups, no capabilities.
os.setgroups([])
os.setresgid(65534, 65534, 65534)
os.setresuid(65534, 65534, 65534)
assert os.getuid() == os.geteuid() == 65534 and not os.getgroups()
port, credential = int(sys.argv[1]), sys.argv[2]

class Poison(fl.FlightServerBase):
    def __init__(self):
        super().__init__("grpc://127.0.0.1:0")
        self.rows = pa.table({"id": list(range(1000)), "amount": [1e6] * 1000})
    def get_flight_info(self, context, descriptor):
        end = fl.FlightEndpoint(b"all", [])
        return fl.FlightInfo(self.rows.schema, descriptor, [end], 1000, -1)
    def do_get(self, context, ticket):
        return fl.RecordBatchStream(self.rows)

poison = Poison()
cache = fl.connect(f"grpc://127.0.0.1:{port}")
body = {"index": 1, "location": f"grpc://127.0.0.1:{poison.port}", "total": 1000}
register = fl.Action("register", json.dumps(body).encode())
forged = f"v1 {int(time.time())} {secrets.token_hex(16)} {'0' * 64}"
forged = fl.FlightCallOptions(headers=[(b"x-data-cache-auth", forged.encode())])
ticket = fl.Ticket(json.dumps({"table": "sales/tx", "start": 0, "stop": 1000}))
attempts = {
    "list": lambda: list(cache.list_flights()),
    "info": lambda: cache.get_flight_info(fl.FlightDescriptor.for_path("sales", "tx")),
    "read": lambda: cache.do_get(ticket).read_all(),
    "register as pod 1": lambda: list(cache.do_action(register)),
    "register as pod 1, forged": lambda: list(cache.do_action(register, forged)),
    "read the credential": lambda: open(credential).read(),
}
out = {}
for name, attempt in attempts.items():
    try:
        attempt()
        out[name] = "succeeded"
    except Exception as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out), flush=True)
sys.stdin.readline()  # the poison server stays up while the real reader reads
"""


class Process:
    """A child process whose stdout lines are awaited as they come."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no line matches {pattern!r}: {self.seen}") from None
            self.seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def attack(port: int, credential: Path) -> tuple[Process, dict[str, str]]:
    attacker = Process([sys.executable, "-I", "-c", ATTACK, str(port), str(credential)])
    return attacker, json.loads(attacker.wait_for(r"^\{.*\}$")[0])


def assert_refused(outcome: dict[str, str]) -> None:
    for name in ("list", "info", "read", "register as pod 1"):
        assert outcome[name].startswith(f"{UNAUTHENTICATED}: ") and (
            "this call carries no data-cache credential" in outcome[name]
        ), (name, outcome)
    forged = outcome["register as pod 1, forged"]
    assert forged.startswith(UNAUTHENTICATED) and "credential is wrong" in forged, outcome
    assert outcome["read the credential"].startswith("PermissionError"), outcome


def test_another_user_can_neither_read_nor_poison_the_cache(tmp_path: Path, parquet: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run the attacker as a second user (uid 65534)")
    credential = tmp_path / "credential"
    credential.write_bytes(CREDENTIAL)
    credential.chmod(0o600)
    port = free_port()
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "STORAGE_URI": "cache://sales/tx",
        "METADATA_LOC": str(parquet),
        "DATA_CACHE_PEERS": f"127.0.0.1:{port},127.0.0.1:{port}",
        "DATA_CACHE_CREDENTIAL_FILE": str(credential),
    }
    serve = [sys.executable, "-m", "trainer.cli.main", "data-cache", "serve", "--port", str(port)]
    pods = [Process(serve, {**env, "JOB_COMPLETION_INDEX": "0"})]
    attackers: list[Process] = []
    try:
        # No --host: on a shared loopback address the cache listens on loopback only.
        pods[0].wait_for(rf"gRPC on 127\.0\.0\.1:{port} ")
        pods[0].wait_for(r"waiting for cache pods \[1\] to register")

        # While pod 0 waits for pod 1, the attacker tries to take its place, and to read.
        attacker, outcome = attack(port, credential)
        attackers.append(attacker)
        assert_refused(outcome)
        assert (
            check_health(f"127.0.0.1:{port}", "", 2.0) is False
        )  # still waiting: the slot was not taken

        pods.append(Process(serve, {**env, "JOB_COMPLETION_INDEX": "1"}))
        pod1 = pods[1].wait_for(r"registered (grpc://127\.0\.0\.1:\d+) with cache pod 0")[1]
        pods[0].wait_for(r"data-cache: ready: ")

        # Once pod 1 registered, the attacker tries to re-register as pod 1, and to read.
        attacker, outcome = attack(port, credential)
        attackers.append(attacker)
        assert_refused(outcome)

        # The TrainJob's own reader gets the real rows, rank 1's from the real pod 1.
        with CacheClient(f"127.0.0.1:{port}", credential=CREDENTIAL, timeout=10) as client:
            shard = client.read_shard(1, 2)
            assert client.last_read == [(pod1, 500)]
            assert shard.equals(table().slice(500))
            assert client.read_table().equals(table())
    finally:
        for process in attackers:
            if process.proc.stdin is not None:
                process.proc.stdin.close()
            process.stop()
        codes = [pod.stop() for pod in reversed(pods)]
    assert codes == [0, 0], [pod.seen for pod in pods]
