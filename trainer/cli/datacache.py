"""``trainer data-cache serve``: one pod of the data cache (docs/data-cache.md), the program
the ``cache-initializer`` step of ``torch-distributed-with-cache`` runs, locally and as the
cache image's entrypoint on a cluster.

Exit status: 0 when stopped by SIGTERM / SIGINT after serving; 1 when the cache cannot start
(the dataset is missing or unreadable, the port cannot be bound, the ``datacache`` extra is
not installed); 2 for a malformed setting (an env variable or option, named in the message),
a missing or unreadable credential included. pyarrow and grpcio are imported only here, when
serving starts.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from trainer.cli.helptext import HELP_MARKUP
from trainer.datacache import auth, deps
from trainer.datacache import config as cfg

app = typer.Typer(
    help="The data cache: an in-memory Arrow table served over Arrow Flight.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=HELP_MARKUP,
)


def _log(line: str) -> None:
    typer.echo(line, err=line.startswith("error:"))


@app.command()
def serve(
    port: Annotated[
        int, typer.Option("--port", help="gRPC port for Flight and grpc.health.v1 (0: any).")
    ] = cfg.DEFAULT_PORT,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="Address to listen on (default: 127.0.0.1 when this pod's "
            f"${cfg.ENV_PEERS} entry is a loopback address or there is none, else 0.0.0.0).",
        ),
    ] = None,
    credential_file: Annotated[
        str | None,
        typer.Option(
            "--credential-file",
            help="File holding the TrainJob's data-cache credential "
            f"(default: ${auth.ENV_CREDENTIAL_FILE}).",
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            "--source", help=f"Dataset path or file:// URI (default: ${cfg.ENV_METADATA_LOC})."
        ),
    ] = None,
    table: Annotated[
        str | None,
        typer.Option(
            "--table", help=f"cache://<schema>/<table> (default: ${cfg.ENV_STORAGE_URI})."
        ),
    ] = None,
    index: Annotated[
        int | None,
        typer.Option("--index", help=f"This pod's index (default: ${cfg.ENV_INDEX}, else 0)."),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option("--format", help=f"parquet or csv (default: ${cfg.ENV_FORMAT} or by name)."),
    ] = None,
) -> None:
    """Load this pod's part of the table and serve it over Arrow Flight until stopped.

    Reports gRPC health NOT_SERVING while loading and SERVING once loaded, on the same port.
    Every Flight call must be signed with the TrainJob's credential.
    """
    try:
        config = cfg.from_env(
            os.environ, source=source, table=table, index=index, port=port, fmt=fmt
        )
    except cfg.ConfigError as exc:
        _log(f"error: data-cache: {exc}")
        raise typer.Exit(2) from None
    missing = deps.available()
    if missing is not None:
        _log(f"error: {missing}")
        raise typer.Exit(1)
    try:
        if credential_file is not None:
            credential = auth.read_credential(credential_file)
        else:
            credential = auth.credential_from_env(os.environ)
    except auth.CredentialError as exc:
        _log(f"error: data-cache: {exc}")
        raise typer.Exit(2) from None
    from trainer.datacache.server import serve as run_server  # noqa: PLC0415 - needs the extra

    code = run_server(config, credential, _log, host=host)
    # The server is stopped and every line written: end here, without the interpreter's
    # teardown, where the C++ static destructors of gRPC and Arrow Flight can hang or abort
    # after a clean stop (a cache stopped by SIGTERM outlived a 10 s wait once in CI; the
    # data-cache example's ranks, which load the same libraries, aborted: examples/data-cache).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
