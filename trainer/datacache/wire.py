"""Arrow Flight on the gRPC wire, for a server that serves Flight with grpcio beside the
grpc.health.v1 service on the same port (which pyarrow's own Flight server cannot: it
offers no way to add a gRPC service).

Flight is a gRPC service (``arrow.flight.protocol.FlightService``, defined in Arrow's
``Flight.proto``: https://github.com/apache/arrow/blob/main/format/Flight.proto). Its
request and reply messages are (de)serialized here with pyarrow's own Flight classes
(``FlightDescriptor``, ``Ticket``, ``FlightInfo``); the one message pyarrow does not expose,
``FlightData`` (an IPC message's flatbuffer header in field 2, its body in field 1000), and
``SchemaResult`` (field 1) are written by hand: a protobuf field of wire type 2 is its tag, a
varint length and the bytes.

Tickets and descriptors of this cache are JSON:
    descriptor path ``[<schema>, <table>]``: the whole table;
    descriptor command ``{"table": "<schema>/<table>", "rank": R, "world": W}``: rank R's
    shard of W (:mod:`~trainer.datacache.sharding`);
    ticket ``{"table": "<schema>/<table>", "start": S, "stop": E}``: rows [S, E) of the table,
    all held by the pod the endpoint points at.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as fl

from trainer.datacache.sharding import RowRange
from trainer.machinery.protowire import length_delimited

SERVICE = "arrow.flight.protocol.FlightService"
BATCH_ROWS = 65536


def flight_data(ipc_message: Any) -> bytes:
    """A ``FlightData`` message carrying one encapsulated IPC message (a pyarrow Buffer)."""
    message = pa.ipc.read_message(ipc_message)
    out = length_delimited(2, message.metadata.to_pybytes())
    body = message.body
    if body is not None and body.size:
        out += length_delimited(1000, body.to_pybytes())
    return out


def stream(table: Any) -> Iterator[bytes]:
    """The ``FlightData`` messages of a DoGet reply: the schema, then the record batches."""
    yield flight_data(table.schema.serialize())
    for batch in table.to_batches(max_chunksize=BATCH_ROWS):
        if batch.num_rows:
            yield flight_data(batch.serialize())


def schema_result(schema: Any) -> bytes:
    return length_delimited(1, schema.serialize().to_pybytes())


@dataclass(frozen=True)
class Request:
    """What a descriptor asks for: the table, and a rank's shard or (None) all of it."""

    table: str
    rank: int | None = None
    world: int | None = None


class BadRequest(ValueError):
    """A descriptor or ticket this cache does not understand."""


def parse_descriptor(raw: bytes) -> Request:
    try:
        descriptor = fl.FlightDescriptor.deserialize(raw)
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise BadRequest(f"not a FlightDescriptor: {exc}") from exc
    if descriptor.descriptor_type == fl.DescriptorType.PATH:
        path = [p.decode() if isinstance(p, bytes) else str(p) for p in descriptor.path or []]
        if len(path) == 1:
            return Request(path[0])
        return Request("/".join(path))
    try:
        command = json.loads(descriptor.command)
        table = str(command["table"])
        rank, world = int(command["rank"]), int(command["world"])
    except (ValueError, KeyError, TypeError) as exc:
        raise BadRequest(
            'a command descriptor must be JSON {"table": "<schema>/<table>", "rank": R, '
            f'"world": W}} ({exc})'
        ) from exc
    if world < 1 or not 0 <= rank < world:
        raise BadRequest(f"rank {rank} of world size {world}: need 0 <= rank < world")
    return Request(table, rank, world)


def shard_descriptor(table: str, rank: int, world: int) -> Any:
    """The descriptor asking for rank ``rank``'s shard of ``world``."""
    return fl.FlightDescriptor.for_command(
        json.dumps({"table": table, "rank": rank, "world": world})
    )


def ticket(table: str, rows: RowRange) -> Any:
    return fl.Ticket(json.dumps({"table": table, "start": rows.start, "stop": rows.stop}))


def parse_ticket(raw: bytes) -> tuple[str, RowRange]:
    try:
        body = json.loads(fl.Ticket.deserialize(raw).ticket)
        table, start, stop = str(body["table"]), int(body["start"]), int(body["stop"])
    except (ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        raise BadRequest(f"not a ticket of this cache: {exc}") from exc
    if not 0 <= start <= stop:
        raise BadRequest(f"ticket rows {start}-{stop} are not a range")
    return table, RowRange(start, stop)
