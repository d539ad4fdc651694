"""Reading from the data cache in a training process.

``read_shard()`` returns this rank's shard of the cached table as a pyarrow Table: rank and
world size from the env torchrun (``RANK``, ``WORLD_SIZE``) or the controller
(``PET_NODE_RANK``, ``PET_NNODES``) sets, the cache from ``DATA_CACHE_ENDPOINT`` (which the
controller injects into the trainer's containers). The shards of ranks ``0..W-1`` are disjoint
and together hold every row of the table once (:mod:`~trainer.datacache.sharding`).

The first call asks the cache's pod 0 for the shard's FlightInfo; its endpoints name the cache
pods holding the rows, and each piece is read (DoGet) from the pod holding it, so no rows pass
through pod 0 that pod 0 does not hold.

Every call is signed with the TrainJob's credential, read from the file
``$DATA_CACHE_CREDENTIAL_FILE`` names (the controller mounts it into the trainer's containers),
and every answer is used only once its server has proved it holds the same credential
(:mod:`~trainer.datacache.signed`; docs/data-cache.md, "Security").

    from trainer.datacache.client import read_shard
    shard = read_shard()            # a pyarrow.Table
    features = shard.to_pandas()    # or .column("x").to_numpy(), ...
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from trainer.datacache import auth, wire
from trainer.datacache.signed import SignedClient

ENV_ENDPOINT = "DATA_CACHE_ENDPOINT"
CONNECT_TIMEOUT = 30.0


class CacheClientError(RuntimeError):
    """The cache cannot be reached or asked; the message says why."""


def endpoint_from_env(env: Mapping[str, str] | None = None) -> str:
    value = (env if env is not None else os.environ).get(ENV_ENDPOINT, "")
    if not value:
        raise CacheClientError(
            f"{ENV_ENDPOINT} is not set: run on a runtime with a cache-initializer step "
            "(torch-distributed-with-cache) or pass endpoint='host:port'"
        )
    return value


def rank_from_env(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(rank, world size)``: torchrun's RANK / WORLD_SIZE, else PET_NODE_RANK / PET_NNODES
    (one process per node), else ``(0, 1)``."""
    env = env if env is not None else os.environ
    for rank_var, world_var in (("RANK", "WORLD_SIZE"), ("PET_NODE_RANK", "PET_NNODES")):
        if env.get(rank_var) and env.get(world_var):
            try:
                rank, world = int(env[rank_var]), int(env[world_var])
            except ValueError as exc:
                raise CacheClientError(
                    f"{rank_var}={env[rank_var]!r} / {world_var}={env[world_var]!r}: not integers"
                ) from exc
            if world < 1 or not 0 <= rank < world:
                raise CacheClientError(f"{rank_var}={rank} is outside 0..{world - 1}")
            return rank, world
    return 0, 1


def _location(endpoint: str) -> str:
    return endpoint if "://" in endpoint else f"grpc://{endpoint}"


def credential_from_env(env: Mapping[str, str] | None = None) -> bytes:
    """The TrainJob's data-cache credential, from the file ``$DATA_CACHE_CREDENTIAL_FILE``."""
    try:
        return auth.credential_from_env(env)
    except auth.CredentialError as exc:
        raise CacheClientError(str(exc)) from exc


class CacheClient:
    """Flight clients of the cache: pod 0 (the endpoint), and the pods it points at.
    ``credential``: the TrainJob's (default: read from ``$DATA_CACHE_CREDENTIAL_FILE``)."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        credential: bytes | None = None,
        timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.endpoint = _location(endpoint or endpoint_from_env())
        self.credential = credential if credential is not None else credential_from_env()
        self.timeout = timeout
        self._clients: dict[str, SignedClient] = {}
        self.head = self._client(self.endpoint)
        self.last_read: list[tuple[str, int]] = []  # (location, rows) of the last read

    def _client(self, location: str) -> SignedClient:
        if location not in self._clients:
            client = SignedClient(location, self.credential)
            try:
                client.wait_for_available(timeout=self.timeout)
            except fl.FlightUnauthenticatedError as exc:
                client.close()
                raise CacheClientError(
                    f"the data cache at {location} and this pod do not share a credential: {exc}"
                ) from exc
            except fl.FlightError as exc:
                client.close()
                raise CacheClientError(f"cannot reach the data cache at {location}: {exc}") from exc
            self._clients[location] = client
        return self._clients[location]

    def tables(self) -> list[str]:
        """The tables the cache serves, as ``<schema>/<table>``."""
        names = []
        try:
            infos = self.head.list_flights()
        except pa.ArrowException as exc:
            raise CacheClientError(
                f"listing the tables of the data cache at {self.endpoint}: {exc}"
            ) from exc
        for info in infos:
            path = [p.decode() if isinstance(p, bytes) else str(p) for p in info.descriptor.path]
            names.append("/".join(path))
        return names

    def _table(self, table: str | None) -> str:
        if table:
            return table
        names = self.tables()
        if len(names) != 1:
            raise CacheClientError(f"the cache serves {names}: name the table to read")
        return names[0]

    def read(self, descriptor: Any) -> Any:
        """Every endpoint of ``descriptor``'s FlightInfo, read and concatenated in order."""
        try:
            info = self.head.get_flight_info(descriptor)
            tables = []
            self.last_read = []
            for endpoint in info.endpoints:
                locations = [str(loc.uri.decode()) for loc in endpoint.locations]
                location = locations[0] if locations else self.endpoint
                tables.append(self._client(location).read(endpoint.ticket))
                self.last_read.append((location, tables[-1].num_rows))
        except pa.ArrowException as exc:  # Flight errors, and KeyError for NOT_FOUND
            raise CacheClientError(
                f"reading from the data cache at {self.endpoint}: {exc}"
            ) from exc
        if not tables:
            return info.schema.empty_table()
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def read_shard(self, rank: int, world_size: int, table: str | None = None) -> Any:
        return self.read(wire.shard_descriptor(self._table(table), rank, world_size))

    def read_table(self, table: str | None = None) -> Any:
        schema, _, name = self._table(table).partition("/")
        return self.read(fl.FlightDescriptor.for_path(schema, name))

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def __enter__(self) -> CacheClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_shard(
    rank: int | None = None,
    world_size: int | None = None,
    *,
    endpoint: str | None = None,
    table: str | None = None,
    credential: bytes | None = None,
) -> Any:
    """This rank's shard of the cached table (see the module docstring)."""
    if rank is None or world_size is None:
        env_rank, env_world = rank_from_env()
        rank = env_rank if rank is None else rank
        world_size = env_world if world_size is None else world_size
    with CacheClient(endpoint, credential=credential) as client:
        return client.read_shard(rank, world_size, table)
