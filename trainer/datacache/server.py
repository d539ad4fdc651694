"""The cache server: one pod's part of a table in memory, served over Arrow Flight, with
grpc.health.v1 on the same port answering SERVING only once the part is loaded.

One gRPC server (grpcio) carries both services, so a Kubernetes ``grpc`` readinessProbe on the
Flight port holds the training pods (``dependsOn: Ready``) until every cache pod is warm.

Flight methods served (messages in :mod:`~trainer.datacache.wire`)
    ``GetFlightInfo``: the table's schema, row count and endpoints. A path descriptor asks for
    the whole table: one endpoint per cache pod. A command descriptor asks for one rank's
    shard: an endpoint per piece of it, each pointing at the pod holding those rows
    (``grpc://<DATA_CACHE_PEERS[k]>``; no location for this pod's own rows, which Flight
    reads as "this server"). Any pod answers, as every pod knows the split.
    ``DoGet``: rows of this pod's part, as record batches of at most 65,536 rows.
    ``GetSchema``, ``ListFlights``: the table's schema; the one table served.
Until the part is loaded every Flight call answers UNAVAILABLE ("the cache is loading").

Every Flight call must be signed with the TrainJob's credential (:mod:`~trainer.datacache.auth`)
or is answered UNAUTHENTICATED, before anything else; a good call's answer carries the
server's proof. grpc.health.v1 answers anyone (the kubelet's gRPC probe carries no
credential), and tells only whether the cache is loaded.

How the rows are split: :mod:`~trainer.datacache.sharding`. Each pod reads the whole dataset
and keeps its part, so all pods agree on the split without talking to each other.

Pods on one shared address (the local plane, :attr:`CacheConfig.shared_address`): pod 0 binds
the declared port; every other pod binds a free port, loads its part and registers its
location with pod 0 (Flight action ``register``, JSON ``{"index", "location", "total"}``,
signed like every call). The first registration of an index stands: another location for it
is refused (ALREADY_EXISTS), and a location must be on the pods' shared host.
Pod 0 points readers at the registered locations and reports SERVING only once its own part
is loaded and every other pod has registered; as the probes of all cache pods reach pod 0's
port there, the cache turns Ready only when every part is in memory.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, NoReturn

import grpc
import pyarrow as pa
import pyarrow.flight as fl
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from trainer.datacache import auth, wire
from trainer.datacache.config import CacheConfig, default_host, split_host_port
from trainer.datacache.loader import DatasetError, load_part
from trainer.datacache.sharding import RowRange, pieces, split
from trainer.datacache.signed import SignedClient

Log = Callable[[str], None]
REGISTER_TIMEOUT = 120.0
WORKERS = 16  # concurrent calls; a DoGet holds one while it streams


class BindError(OSError):
    """The port could not be bound."""


class RegisterError(RuntimeError):
    """Pod 0 could not be told where this pod listens."""


class CacheState:
    """What this pod holds, once loaded."""

    def __init__(self, config: CacheConfig) -> None:
        self.config = config
        self.loaded = threading.Event()
        self.serving = threading.Event()
        self.lock = threading.Lock()
        self.part: Any = None
        self.total = 0
        self.rows = RowRange(0, 0)
        self.parts: list[RowRange] = []
        self.registered: dict[int, str] = {}  # pod index -> location (shared address only)

    def set(self, part: Any, total: int, rows: RowRange) -> None:
        self.part, self.total, self.rows = part, total, rows
        self.parts = split(total, self.config.size)
        self.loaded.set()

    @property
    def takes_registrations(self) -> bool:
        return self.config.shared_address and self.config.index == 0

    def waiting_for(self) -> list[int]:
        """The pods that have still to register with this one."""
        if not self.takes_registrations:
            return []
        return [k for k in range(1, self.config.size) if k not in self.registered]

    def locations(self, index: int) -> list[str]:
        if index == self.config.index or not self.config.peers:
            return []
        if self.config.shared_address:
            return [self.registered[index]] if index in self.registered else []
        return [f"grpc://{self.config.peers[index]}"]


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """End the call with ``code`` (``context.abort`` raises; the raise below never runs)."""
    context.abort(code, message)
    raise AssertionError(message)  # pragma: no cover


def _call_header(context: grpc.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == auth.HEADER_CALL:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


class FlightService:
    """The Flight methods, on raw bytes (see :mod:`~trainer.datacache.wire`)."""

    def __init__(
        self, state: CacheState, verifier: auth.Verifier, on_register: Callable[[], None]
    ) -> None:
        self.state = state
        self.verifier = verifier
        self.on_register = on_register

    def _authenticate(self, method: str, raw: bytes, context: grpc.ServicerContext) -> None:
        """Refuse an unsigned or badly signed call (UNAUTHENTICATED); answer a good one with
        the server's proof (docs/data-cache.md, "Security")."""
        try:
            answer = self.verifier.check(method, raw, _call_header(context))
        except auth.Unauthenticated as exc:
            _abort(context, grpc.StatusCode.UNAUTHENTICATED, str(exc))
        context.send_initial_metadata(((auth.HEADER_PROOF, answer),))

    def _ready(self, context: grpc.ServicerContext) -> CacheState:
        if not self.state.serving.is_set():
            waiting = self.state.waiting_for() if self.state.loaded.is_set() else []
            why = f"waiting for cache pods {waiting} to register" if waiting else "loading"
            _abort(context, grpc.StatusCode.UNAVAILABLE, f"the cache is {why}")
        return self.state

    def _table(self, name: str, context: grpc.ServicerContext) -> None:
        if name != self.state.config.name:
            _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"no table {name!r} in this cache (it holds {self.state.config.name!r})",
            )

    def _request(self, raw: bytes, context: grpc.ServicerContext) -> wire.Request:
        try:
            request = wire.parse_descriptor(raw)
        except wire.BadRequest as exc:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        self._table(request.table, context)
        return request

    def info(self, request: wire.Request, descriptor: Any) -> Any:
        state = self.state
        wanted = RowRange(0, state.total)
        if request.rank is not None and request.world is not None:
            wanted = split(state.total, request.world)[request.rank]
        endpoints = [
            fl.FlightEndpoint(wire.ticket(state.config.name, rows), state.locations(k))
            for k, rows in pieces(state.parts, wanted)
        ]
        return fl.FlightInfo(state.part.schema, descriptor, endpoints, wanted.length, -1)

    def get_flight_info(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        self._authenticate("GetFlightInfo", raw, context)
        self._ready(context)
        request = self._request(raw, context)
        return bytes(self.info(request, fl.FlightDescriptor.deserialize(raw)).serialize())

    def get_schema(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        self._authenticate("GetSchema", raw, context)
        state = self._ready(context)
        self._request(raw, context)
        return wire.schema_result(state.part.schema)

    def list_flights(self, raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        self._authenticate("ListFlights", raw, context)
        state = self._ready(context)
        schema, table = state.config.schema, state.config.table
        descriptor = fl.FlightDescriptor.for_path(schema, table)
        yield bytes(self.info(wire.Request(state.config.name), descriptor).serialize())

    def do_get(self, raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        self._authenticate("DoGet", raw, context)
        state = self._ready(context)
        try:
            name, rows = wire.parse_ticket(raw)
        except wire.BadRequest as exc:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        self._table(name, context)
        if rows.start < state.rows.start or rows.stop > state.rows.stop:
            _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"rows {rows.start}-{rows.stop} are not held by cache pod "
                f"{state.config.index} (it holds rows {state.rows.start}-{state.rows.stop})",
            )
        piece = state.part.slice(rows.start - state.rows.start, rows.length)
        yield from wire.stream(piece)

    def do_action(self, raw: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        """``register``: another pod of a cache on one shared address says where it listens.
        Signed like every call; the first registration of an index stands."""
        self._authenticate("DoAction", raw, context)
        state = self.state
        try:
            action = fl.Action.deserialize(raw)
        except (pa.ArrowException, ValueError, TypeError) as exc:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"not a Flight Action: {exc}")
        if action.type != "register":
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"unknown action {action.type!r}")
        if not state.takes_registrations:
            _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                "only pod 0 of a cache whose pods share one address takes registrations",
            )
        try:
            body = json.loads(action.body.to_pybytes())
            index, location, total = int(body["index"]), str(body["location"]), int(body["total"])
        except (ValueError, KeyError, TypeError) as exc:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"bad registration: {exc}")
        if not 0 < index < state.config.size:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"no cache pod {index}")
        shared_host = split_host_port(state.config.peers[0])[0]
        if not _is_location_on(location, shared_host):
            _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"cache pod {index} registered {location!r}: a location must be "
                f"grpc://{shared_host}:<port>, on the address the cache pods share",
            )
        if state.loaded.is_set() and total != state.total:
            _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"cache pod {index} read {total} rows, pod 0 read {state.total}: every pod "
                "must read the same dataset",
            )
        with state.lock:
            before = state.registered.setdefault(index, location)
        if before != location:
            _abort(
                context,
                grpc.StatusCode.ALREADY_EXISTS,
                f"cache pod {index} is already registered at {before}; a second registration "
                f"({location}) is refused",
            )
        self.on_register()
        yield fl.Result(b"registered").serialize()

    def handler(self) -> grpc.GenericRpcHandler:
        def same(b: bytes) -> bytes:
            return b

        def unary(fn: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=same, response_serializer=same
            )

        def streaming(fn: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_stream_rpc_method_handler(
                fn, request_deserializer=same, response_serializer=same
            )

        return grpc.method_handlers_generic_handler(
            wire.SERVICE,
            {
                "GetFlightInfo": unary(self.get_flight_info),
                "GetSchema": unary(self.get_schema),
                "ListFlights": streaming(self.list_flights),
                "DoGet": streaming(self.do_get),
                "DoAction": streaming(self.do_action),
            },
        )


def _is_location_on(location: str, host: str) -> bool:
    """Whether ``location`` is ``grpc://<host>:<port>``."""
    scheme, sep, rest = location.partition("://")
    if scheme != "grpc" or not sep:
        return False
    try:
        found, port = split_host_port(rest)
    except ValueError:
        return False
    return found == host and 0 < port < 65536


class CacheServer:
    """The gRPC server of one cache pod: start (health NOT_SERVING), load, serve, stop.
    ``credential``: the TrainJob's (:mod:`~trainer.datacache.auth`); ``host``: the address to
    bind (:func:`~trainer.datacache.config.default_host` by default)."""

    def __init__(self, config: CacheConfig, credential: bytes, *, host: str | None = None) -> None:
        self.config = config
        self.credential = credential
        self.host = host if host is not None else default_host(config)
        self.state = CacheState(config)
        self.health = health.HealthServicer()
        # No SO_REUSEPORT (grpcio's default on Linux): a second cache on a port in use must
        # fail to bind, not share the port's connections with the first.
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=WORKERS), options=[("grpc.so_reuseport", 0)]
        )
        service = FlightService(self.state, auth.Verifier(credential), self._maybe_serving)
        self.server.add_generic_rpc_handlers((service.handler(),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = 0
        self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)

    def _set_health(self, status: int) -> None:
        for service in ("", wire.SERVICE):
            self.health.set(service, status)

    def _maybe_serving(self) -> None:
        """SERVING once this pod's part is loaded and (pod 0 on a shared address) every other
        pod has registered."""
        with self.state.lock:
            if self.state.loaded.is_set() and not self.state.waiting_for():
                self._set_health(health_pb2.HealthCheckResponse.SERVING)
                self.state.serving.set()

    def start(self) -> int:
        """Bind and start answering (health NOT_SERVING until :meth:`load`). On a shared
        address only pod 0 binds the declared port; the others take a free one."""
        config = self.config
        port = 0 if config.shared_address and config.index > 0 else config.port
        address = f"[{self.host}]:{port}" if ":" in self.host else f"{self.host}:{port}"
        try:
            port = int(self.server.add_insecure_port(address))
        except RuntimeError as exc:
            raise BindError(f"cannot listen on {address}: {exc}") from exc
        if not port:
            raise BindError(f"cannot listen on {address}: the port is in use or not allowed")
        self.port = port
        self.server.start()
        return port

    def load(self) -> tuple[int, RowRange]:
        """Load this pod's part, then report SERVING. Raises :class:`DatasetError`."""
        part, total, rows = load_part(self.config)
        self.state.set(part, total, rows)
        self._maybe_serving()
        return total, rows

    def register(self, timeout: float = REGISTER_TIMEOUT) -> str:
        """Tell pod 0 where this pod listens (a cache on one shared address); retried until
        pod 0 answers or ``timeout``. Returns the location registered; raises
        :class:`RegisterError`."""
        config = self.config
        head = f"grpc://{config.peers[0]}"
        host = config.peers[config.index].rpartition(":")[0]
        location = f"grpc://{host}:{self.port}"
        body = {"index": config.index, "location": location, "total": self.state.total}
        action = fl.Action("register", json.dumps(body).encode())
        deadline = time.monotonic() + timeout
        client = SignedClient(head, self.credential)
        try:
            while True:
                try:
                    client.do_action(action, timeout=5)
                    return location
                except fl.FlightUnavailableError as exc:  # pod 0 is not listening yet
                    if time.monotonic() > deadline:
                        raise RegisterError(f"cache pod 0 at {head} did not answer: {exc}") from exc
                    time.sleep(0.25)
                except pa.ArrowException as exc:
                    raise RegisterError(f"cache pod 0 at {head} refused: {exc}") from exc
        finally:
            client.close()

    def stop(self, grace: float | None = 1.0) -> None:
        """Not serving, then stopped: calls still running get ``grace`` seconds, and the stop
        is not waited for more than 5 s past that (gRPC cancels them at ``grace``)."""
        self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        self.server.stop(grace).wait((grace or 0.0) + 5.0)


def serve(config: CacheConfig, credential: bytes, log: Log, *, host: str | None = None) -> int:
    """Run one cache pod until SIGTERM or SIGINT; the exit status (1: could not load)."""
    began = time.monotonic()
    server = CacheServer(config, credential, host=host)
    try:
        port = server.start()
    except BindError as exc:
        log(f"error: {exc}")
        return 1
    log(
        f"data-cache: pod {config.index} of {config.size} loading table {config.name} from "
        f"{config.source}; gRPC on {server.host}:{port} (health NOT_SERVING until loaded; "
        "Flight calls need the TrainJob's credential)"
    )
    try:
        total, rows = server.load()
    except DatasetError as exc:
        log(f"error: data-cache: cannot load table {config.name}: {exc}")
        server.stop(0)
        return 1
    if config.shared_address and config.index > 0:
        try:
            location = server.register()
        except RegisterError as exc:
            log(f"error: data-cache: {exc}")
            server.stop(0)
            return 1
        log(f"data-cache: registered {location} with cache pod 0 (pods share one address)")
    elif server.state.waiting_for():
        log(
            f"data-cache: loaded; waiting for cache pods {server.state.waiting_for()} to "
            "register (pods share one address)"
        )
        server.state.serving.wait()
    log(
        f"data-cache: ready: table {config.name}, rows {rows.start}-{rows.stop} of {total} "
        f"({rows.length} rows), {time.monotonic() - began:.2f}s after start; serving Arrow "
        f"Flight on port {port}, health SERVING"
    )
    stopped = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stopped.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        stopped.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        server.stop()
    log("data-cache: stopped")
    return 0
