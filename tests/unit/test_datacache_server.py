"""The data cache for real on loopback: the loader on Parquet / CSV files, three cache
servers splitting a table, pyarrow's own Flight client reading it, grpc.health.v1 before and
after loading, the local executor's gRPC probe, and ``trainer data-cache serve``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
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
from trainer.datacache.loader import DatasetError, load  # noqa: E402
from trainer.datacache.server import BindError, CacheServer  # noqa: E402
from trainer.datacache.signed import SignedClient  # noqa: E402
from trainer.local.executor.kubelet.grpc_probe import check_health  # noqa: E402

ROWS = 1000
CREDENTIAL = b"test-credential-0123456789abcdef"


def table(rows: int = ROWS) -> Any:
    return pa.table({"id": list(range(rows)), "x": [i * 0.5 for i in range(rows)]})


@pytest.fixture
def parquet(tmp_path: Path) -> Path:
    path = tmp_path / "t.parquet"
    pq.write_table(table(), path, row_group_size=300)
    return path


def signed(port: int) -> SignedClient:
    """pyarrow's Flight client, its calls signed with the test's credential."""
    return SignedClient(f"grpc://127.0.0.1:{port}", CREDENTIAL)


def config(source: Path, index: int = 0, peers: tuple[str, ...] = ()) -> CacheConfig:
    return CacheConfig("sales", "tx", source, None, index, peers, port=0)


# --- loader -------------------------------------------------------------------------------------


def test_loads_csv_parquet_and_a_directory_of_them(tmp_path: Path, parquet: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("id,x\n" + "".join(f"{i},{i * 0.5}\n" for i in range(ROWS)))
    assert load(csv).equals(table())
    assert load(parquet).equals(table())
    parts = tmp_path / "parts"
    parts.mkdir()
    pq.write_table(table().slice(0, 400), parts / "a.parquet")
    pq.write_table(table().slice(400), parts / "b.parquet")
    assert load(parts).combine_chunks().equals(table())


def test_dictionary_columns_are_decoded(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"c": pa.array(["a", "b", "a"]).dictionary_encode()}), path)
    assert load(path).schema.field("c").type == pa.string()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.parquet", None, "no such file or directory (the dataset to cache is missing)"),
        ("bad.parquet", b"not parquet at all", "is not a Parquet file Arrow can read"),
        ("bad.csv", b"a,b\n1,2,3\n", "is not a CSV file Arrow can read"),
        ("data.txt", b"a\n1\n", "cannot tell its format from the name"),
    ],
)
def test_bad_datasets_are_named_in_the_error(
    tmp_path: Path, name: str, content: bytes | None, message: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(
        DatasetError, match=r".*".join(map(__import__("re").escape, [str(path), message]))
    ):
        load(path)


def test_an_empty_directory_and_mismatched_files_are_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"holds no \.parquet or \.csv file"):
        load(tmp_path)
    pq.write_table(table(3), tmp_path / "a.parquet")
    pq.write_table(pa.table({"other": [1]}), tmp_path / "b.parquet")
    with pytest.raises(DatasetError, match=r"b\.parquet: its columns"):
        load(tmp_path)


# --- servers ------------------------------------------------------------------------------------


@pytest.fixture
def cache(parquet: Path) -> Iterator[list[CacheServer]]:
    """Three cache pods on loopback holding one table between them."""
    servers = [CacheServer(config(parquet), CREDENTIAL, host="127.0.0.1") for _ in range(3)]
    ports = [s.start() for s in servers]
    peers = tuple(f"127.0.0.1:{p}" for p in ports)
    for i, server in enumerate(servers):
        server.config = server.state.config = config(parquet, i, peers)
    try:
        yield servers
    finally:
        for server in servers:
            server.stop(0)


def test_health_is_serving_only_once_loaded(cache: list[CacheServer]) -> None:
    head = cache[0]
    assert check_health(f"127.0.0.1:{head.port}", "", 2.0) is False
    with pytest.raises(fl.FlightUnavailableError, match="the cache is loading"):
        signed(head.port).get_flight_info(fl.FlightDescriptor.for_path("sales", "tx"))
    assert head.load() == (ROWS, head.state.rows)
    assert check_health(f"127.0.0.1:{head.port}", "", 2.0) is True
    assert (
        check_health(f"127.0.0.1:{head.port}", "arrow.flight.protocol.FlightService", 2.0) is True
    )
    assert check_health(f"127.0.0.1:{head.port}", "unknown", 2.0) is False
    head.stop(0)
    assert check_health(f"127.0.0.1:{head.port}", "", 1.0) is False


def test_flight_info_points_readers_at_the_pods_holding_each_part(
    cache: list[CacheServer],
) -> None:
    for server in cache:
        server.load()
    assert [s.state.rows.length for s in cache] == [333, 333, 334]
    client = signed(cache[0].port)
    info = client.get_flight_info(fl.FlightDescriptor.for_path("sales", "tx"))
    assert info.total_records == ROWS and info.schema.equals(table().schema)
    locations = [[loc.uri.decode() for loc in e.locations] for e in info.endpoints]
    assert locations == [
        [],
        [f"grpc://127.0.0.1:{cache[1].port}"],
        [f"grpc://127.0.0.1:{cache[2].port}"],
    ]
    # Each pod serves its own rows and refuses another pod's.
    parts = [signed(s.port) for s in cache]
    read = [parts[k].read(e.ticket) for k, e in enumerate(info.endpoints)]
    assert pa.concat_tables(read).equals(table())
    with pytest.raises(pa.ArrowException, match="are not held by cache pod 1"):
        parts[1].read(info.endpoints[0].ticket)
    assert client.get_schema(fl.FlightDescriptor.for_path("sales", "tx")).schema.equals(
        table().schema
    )
    with pytest.raises(pa.ArrowException, match="no table 'sales/other'"):
        client.get_flight_info(fl.FlightDescriptor.for_path("sales", "other"))
    with pytest.raises(pa.ArrowException, match="a command descriptor must be JSON"):
        client.get_flight_info(fl.FlightDescriptor.for_command(b"nonsense"))


@pytest.mark.parametrize("world", [1, 2, 5])
def test_rank_shards_are_disjoint_and_cover_the_table_once(
    cache: list[CacheServer], world: int
) -> None:
    for server in cache:
        server.load()
    ids: list[int] = []
    with CacheClient(f"127.0.0.1:{cache[0].port}", credential=CREDENTIAL, timeout=5) as client:
        assert client.tables() == ["sales/tx"]
        for rank in range(world):
            shard = client.read_shard(rank, world)
            assert shard.schema.equals(table().schema)
            ids.extend(shard.column("id").to_pylist())
        assert client.read_table().num_rows == ROWS
    assert ids == list(range(ROWS))


def test_an_empty_shard_has_the_schema(parquet: Path) -> None:
    server = CacheServer(config(parquet), CREDENTIAL, host="127.0.0.1")
    server.start()
    try:
        server.load()
        with CacheClient(f"127.0.0.1:{server.port}", credential=CREDENTIAL) as client:
            shards = [client.read_shard(r, ROWS + 1) for r in range(2)]
        assert [s.num_rows for s in shards] == [0, 1]
        assert shards[0].schema.equals(table().schema)
    finally:
        server.stop(0)


def test_a_port_in_use_is_refused(parquet: Path) -> None:
    first = CacheServer(config(parquet), CREDENTIAL, host="127.0.0.1")
    port = first.start()
    taken = CacheConfig("sales", "tx", parquet, None, 0, (), port=port)
    try:
        with pytest.raises(BindError, match=f"cannot listen on 127.0.0.1:{port}"):
            CacheServer(taken, CREDENTIAL, host="127.0.0.1").start()
    finally:
        first.stop(0)


def test_the_client_says_when_the_cache_is_unreachable() -> None:
    with pytest.raises(
        CacheClientError, match=r"cannot reach the data cache at grpc://127\.0\.0\.1:1"
    ):
        CacheClient("127.0.0.1:1", credential=CREDENTIAL, timeout=0.5)


# --- the command --------------------------------------------------------------------------------


def trainer_cmd(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "trainer.cli.main", "data-cache", "serve", *args],
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def credential_file(tmp_path: Path) -> Path:
    path = tmp_path / "credential"
    path.write_bytes(CREDENTIAL + b"\n")
    return path


def test_serve_loads_serves_and_stops_on_sigterm(parquet: Path, credential_file: Path) -> None:
    """Run by hand (no DATA_CACHE_PEERS), the cache listens on loopback only."""
    proc = trainer_cmd(
        "--port",
        "0",
        env={
            "STORAGE_URI": "cache://sales/tx",
            "METADATA_LOC": f"file://{parquet}",
            "DATA_CACHE_PEERS": "",
            "DATA_CACHE_CREDENTIAL_FILE": str(credential_file),
        },
    )
    assert proc.stdout is not None
    try:
        first = proc.stdout.readline()
        assert "pod 0 of 1 loading table sales/tx" in first, first
        assert "gRPC on 127.0.0.1:" in first, first
        ready = proc.stdout.readline()
        assert "ready: table sales/tx, rows 0-1000 of 1000" in ready, ready
        port = int(ready.rsplit("port ", 1)[1].split(",")[0])
        assert check_health(f"127.0.0.1:{port}", "", 2.0) is True
        with CacheClient(f"127.0.0.1:{port}", credential=CREDENTIAL) as client:
            assert client.read_table().num_rows == ROWS
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("env", "code", "message"),
    [
        ({"METADATA_LOC": "/x.csv"}, 2, "error: data-cache: STORAGE_URI is not set"),
        (
            {"STORAGE_URI": "cache://a/b", "METADATA_LOC": "/no/such/file.parquet"},
            1,
            "error: data-cache: cannot load table a/b: METADATA_LOC: /no/such/file.parquet: "
            "no such file or directory",
        ),
        (
            {"STORAGE_URI": "cache://a/b", "METADATA_LOC": "/x.csv", "CRED": ""},
            2,
            "error: data-cache: DATA_CACHE_CREDENTIAL_FILE is not set: it names the file "
            "holding the TrainJob's data-cache credential",
        ),
        (
            {"STORAGE_URI": "cache://a/b", "METADATA_LOC": "/x.csv", "CRED": "/no/such/cred"},
            2,
            "error: data-cache: cannot read the data-cache credential /no/such/cred: "
            "No such file or directory",
        ),
        (
            {"STORAGE_URI": "cache://a/b", "METADATA_LOC": "/x.csv", "CRED": "short"},
            2,
            "error: data-cache: the data-cache credential ",
        ),
    ],
)
def test_serve_fails_with_one_clear_line(
    env: dict[str, str], code: int, message: str, credential_file: Path
) -> None:
    clean = dict.fromkeys(("STORAGE_URI", "METADATA_LOC", "DATA_CACHE_PEERS"), "")
    env = dict(env)
    cred = env.pop("CRED", str(credential_file))
    if cred == "short":
        cred = str(credential_file)
        credential_file.write_text("too short\n")
        message += f"{cred} holds 9 bytes; at least 16 are needed"
    env["DATA_CACHE_CREDENTIAL_FILE"] = cred
    proc = trainer_cmd("--port", "0", "--host", "127.0.0.1", env={**clean, **env})
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code
    assert message in err and "Traceback" not in err


def test_pods_on_one_shared_address_register_with_pod_0(parquet: Path) -> None:
    """The local plane's case: every pod's name and port map to one address, so pods 1 and 2
    listen on free ports and tell pod 0; pod 0 is SERVING only once both did."""
    head = CacheServer(config(parquet), CREDENTIAL, host="127.0.0.1")
    port = head.start()
    shared = (f"127.0.0.1:{port}",) * 3
    head.config = head.state.config = config(parquet, 0, shared)
    others = [CacheServer(config(parquet, i, shared), CREDENTIAL, host="127.0.0.1") for i in (1, 2)]
    try:
        assert [s.start() for s in others] != [port, port]
        head.load()
        assert (
            check_health(f"127.0.0.1:{port}", "", 2.0) is False
        )  # pods 1 and 2 have not registered
        with pytest.raises(fl.FlightUnavailableError, match=r"waiting for cache pods \[1, 2\]"):
            signed(port).list_flights()
        for server in others:
            server.load()
            assert server.register(timeout=10) == f"grpc://127.0.0.1:{server.port}"
        assert check_health(f"127.0.0.1:{port}", "", 2.0) is True
        info = signed(port).get_flight_info(fl.FlightDescriptor.for_path("sales", "tx"))
        locations = [[loc.uri.decode() for loc in e.locations] for e in info.endpoints]
        assert locations == [[]] + [[f"grpc://127.0.0.1:{s.port}"] for s in others]
        with CacheClient(f"127.0.0.1:{port}", credential=CREDENTIAL) as client:
            ids = [i for r in range(2) for i in client.read_shard(r, 2).column("id").to_pylist()]
        assert ids == list(range(ROWS))
        # Only pod 0 takes registrations.
        with pytest.raises(pa.ArrowException, match="only pod 0"):
            signed(others[0].port).do_action(
                fl.Action("register", b'{"index": 2, "location": "x", "total": 1}')
            )
    finally:
        for server in [head, *others]:
            server.stop(0)
