"""The ``--state-file`` / ``--reset-damaged-state`` options of ``trainer up`` and ``trainer
apiserver``, and how a state file that cannot be used is reported: one line on stderr naming
the file, what is wrong and the way out, and exit status 2 (no traceback). See
docs/local-plane.md, "State file: durability and recovery"."""

from __future__ import annotations

from typing import Annotated

import typer

from trainer.local.apiserver.statefile import StateFileError

EXIT_STATE_FILE = 2

StateFileOption = Annotated[
    str | None,
    typer.Option(
        "--state-file",
        help="SQLite file keeping objects across restarts (a write is acknowledged once it is "
        "in the file); used by one process at a time.",
    ),
]
ResetDamagedOption = Annotated[
    bool,
    typer.Option(
        "--reset-damaged-state",
        help="If the --state-file is damaged, rename it to FILE.damaged-<timestamp> and start "
        "with an empty one instead of refusing to start.",
    ),
]


def refuse(err: StateFileError) -> typer.Exit:
    """Print why the state file cannot be used; the caller raises the returned Exit."""
    line = f"error: {err}"
    if err.damaged:
        line += (
            f"; move it aside (mv {err.path} {err.path}.damaged) or start with "
            "--reset-damaged-state"
        )
    typer.echo(line, err=True)
    return typer.Exit(EXIT_STATE_FILE)
