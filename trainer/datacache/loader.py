"""Reading the dataset into Arrow: a Parquet or CSV file, or a directory of them (read in
file-name order), from a local path. Every failure is a :class:`DatasetError` whose message
names the file and says what is wrong (missing, unreadable, not in the format, schemas that
differ), so the cache-initializer fails with it rather than a traceback.

Dictionary-encoded columns (a Parquet file written from pandas categoricals) are decoded to
their value type, so every record batch the cache serves is self-contained.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from trainer.datacache.config import ENV_FORMAT, ENV_METADATA_LOC, CacheConfig
from trainer.datacache.sharding import RowRange, part_of

SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


class DatasetError(Exception):
    """The dataset cannot be loaded; the message names the file."""


def format_of(path: Path, fmt: str | None) -> str:
    if fmt is not None:
        return fmt
    found = SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise DatasetError(
            f"{path}: cannot tell its format from the name; name it .parquet or .csv or set "
            f"{ENV_FORMAT} to parquet or csv"
        )
    return found


def files_of(source: Path) -> list[Path]:
    """The files to read: ``source`` itself, or the data files of a directory by name."""
    try:
        if source.is_dir():
            files = sorted(p for p in source.iterdir() if p.suffix.lower() in SUFFIXES)
            if not files:
                raise DatasetError(
                    f"{ENV_METADATA_LOC}: directory {source} holds no .parquet or .csv file"
                )
            return files
        if not source.exists():
            raise DatasetError(
                f"{ENV_METADATA_LOC}: {source}: no such file or directory (the dataset to "
                "cache is missing)"
            )
    except PermissionError as exc:
        raise DatasetError(f"{ENV_METADATA_LOC}: {source}: cannot read: {exc.strerror}") from exc
    return [source]


def read_file(path: Path, fmt: str) -> Any:
    """One file as a pyarrow Table."""
    if not os.access(path, os.R_OK):
        raise DatasetError(f"{path}: cannot read: permission denied")
    try:
        table = pq.read_table(path) if fmt == "parquet" else pa_csv.read_csv(path)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
        kind = "a Parquet" if fmt == "parquet" else "a CSV"
        raise DatasetError(f"{path}: is not {kind} file Arrow can read: {exc}") from exc
    return decode_dictionaries(table)


def decode_dictionaries(table: Any) -> Any:
    fields = [
        pa.field(f.name, f.type.value_type, f.nullable, f.metadata)
        if pa.types.is_dictionary(f.type)
        else f
        for f in table.schema
    ]
    if fields == list(table.schema):
        return table
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))


def load(source: Path, fmt: str | None = None) -> Any:
    """The whole dataset at ``source`` as one pyarrow Table."""
    tables: list[Any] = []
    for path in files_of(source):
        table = read_file(path, format_of(path, fmt))
        if tables and not table.schema.equals(tables[0].schema):
            raise DatasetError(
                f"{path}: its columns ({table.schema.names}) differ from those of the files "
                f"before it ({tables[0].schema.names}); every file of {source} must have the "
                "same schema"
            )
        tables.append(table)
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def load_part(config: CacheConfig) -> tuple[Any, int, RowRange]:
    """This pod's part of the table: ``(part, total rows, the part's rows)``."""
    whole = load(config.source, config.format)
    rows = part_of(whole.num_rows, config.size, config.index)
    return whole.slice(rows.start, rows.length), whole.num_rows, rows
