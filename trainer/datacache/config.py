"""The cache server's settings, read from the environment of its pod (command-line options
override them). Pure: a mapping in, a :class:`CacheConfig` or a :class:`ConfigError` naming
the variable out.

Environment (docs/data-cache.md, "Environment")
    ``STORAGE_URI``       ``cache://<schema>/<table>``: the table's name (the TrainJob's
                          ``initializer.dataset.storageUri``, routed to this container).
    ``METADATA_LOC``      where to load the table from, as upstream's cache names it: a local
                          path or ``file://`` URI of a Parquet or CSV file, or of a directory
                          of them (set in ``initializer.dataset.env``).
    ``DATA_CACHE_FORMAT`` ``parquet`` or ``csv``; by default taken from the file names.
    ``JOB_COMPLETION_INDEX`` this pod's index in the cache (an Indexed Job sets it).
    ``DATA_CACHE_PEERS``  ``host:port`` of every cache pod in index order, comma-separated
                          (the controller injects it); absent means a cache of one pod.
    ``DATA_CACHE_CREDENTIAL_FILE`` the file holding the TrainJob's credential
                          (:mod:`~trainer.datacache.auth`; the controller mounts it).

The address to listen on, unless ``--host`` says: :func:`default_host`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

CACHE_SCHEME = "cache://"
FORMATS = ("parquet", "csv")
ENV_STORAGE_URI = "STORAGE_URI"
ENV_METADATA_LOC = "METADATA_LOC"
ENV_FORMAT = "DATA_CACHE_FORMAT"
ENV_INDEX = "JOB_COMPLETION_INDEX"
ENV_PEERS = "DATA_CACHE_PEERS"
DEFAULT_PORT = 50051
LOOPBACK = "127.0.0.1"
ANY = "0.0.0.0"
_LOOPBACK_NAMES = ("localhost", "::1")

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names it."""


@dataclass(frozen=True)
class CacheConfig:
    schema: str
    table: str
    source: Path
    format: str | None
    index: int
    peers: tuple[str, ...]
    port: int = DEFAULT_PORT

    @property
    def size(self) -> int:
        return max(len(self.peers), 1)

    @property
    def shared_address(self) -> bool:
        """Whether the pods' addresses collapse into one: the local plane maps every pod's name
        to 127.0.0.1 and a declared port to one host port per JobSet, so DATA_CACHE_PEERS
        repeats itself (never so on a cluster, where pod names differ). Pods other than 0 then
        listen on a free port and register it with pod 0 (docs/data-cache.md)."""
        return len(set(self.peers)) < len(self.peers)

    @property
    def name(self) -> str:
        """The table as Flight names it: ``<schema>/<table>``."""
        return f"{self.schema}/{self.table}"


def parse_table(uri: str) -> tuple[str, str]:
    """``cache://<schema>/<table>`` as ``(schema, table)``."""
    if not uri:
        raise ConfigError(
            f"{ENV_STORAGE_URI} is not set: it names the table, cache://<schema>/<table> "
            "(the TrainJob's initializer.dataset.storageUri)"
        )
    if not uri.startswith(CACHE_SCHEME):
        raise ConfigError(f"{ENV_STORAGE_URI}={uri!r}: must be cache://<schema>/<table>")
    parts = uri[len(CACHE_SCHEME) :].split("/")
    if len(parts) != 2 or not all(_NAME.match(p) for p in parts):
        raise ConfigError(
            f"{ENV_STORAGE_URI}={uri!r}: must be cache://<schema>/<table>, each a name of "
            "letters, digits, '_', '.' and '-'"
        )
    return parts[0], parts[1]


def parse_source(location: str) -> Path:
    """A local path or ``file://`` URI as a path (its existence is the loader's concern)."""
    if not location:
        raise ConfigError(
            f"{ENV_METADATA_LOC} is not set: it says where to load the table from, a Parquet "
            "or CSV file (or a directory of them) as a path or file:// URI; set it in the "
            "TrainJob's initializer.dataset.env"
        )
    parsed = urlparse(location)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"{ENV_METADATA_LOC}={location!r}: a file:// URI names no host")
        return Path(unquote(parsed.path))
    if parsed.scheme and len(parsed.scheme) > 1:  # "C:" would be a drive, not a scheme
        raise ConfigError(
            f"{ENV_METADATA_LOC}={location!r}: scheme {parsed.scheme}:// is not supported "
            "(only a local path or file://); copy the data to a volume and give its path"
        )
    return Path(location)


def split_host_port(peer: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as ``(host, port)``; ValueError when it is not."""
    host, sep, port = peer.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{peer!r} is not host:port")
    return host.removeprefix("[").removesuffix("]"), int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: 127.0.0.0/8, ::1 or localhost."""
    return host.startswith("127.") or host.lower() in _LOOPBACK_NAMES


def default_host(config: CacheConfig) -> str:
    """Where to listen when ``--host`` does not say (docs/data-cache.md, "Security").

    On a cluster the controller's ``DATA_CACHE_PEERS`` names this pod by its DNS name, which
    other pods reach on the pod's own IP: listen on every interface of the pod (0.0.0.0).
    On the local plane the same entry arrives rewritten to ``127.0.0.1:<port>`` (every pod is
    a process of this host): listen on loopback only, so the host's other interfaces never
    see the cache. With no peers at all (``trainer data-cache serve`` run by hand) there is
    nobody else to serve: loopback too."""
    if not config.peers:
        return LOOPBACK
    host = split_host_port(config.peers[config.index])[0]
    if not is_loopback(host):
        return ANY
    return "::1" if host == "::1" else LOOPBACK


def parse_peers(value: str) -> tuple[str, ...]:
    peers = tuple(p.strip() for p in value.split(",") if p.strip())
    for peer in peers:
        host, sep, port = peer.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{ENV_PEERS}: {peer!r} is not host:port")
    return peers


def from_env(
    env: Mapping[str, str],
    *,
    source: str | None = None,
    table: str | None = None,
    index: int | None = None,
    port: int = DEFAULT_PORT,
    fmt: str | None = None,
) -> CacheConfig:
    """The settings from ``env``; the keyword arguments (command-line options) win."""
    schema, name = parse_table(table if table is not None else env.get(ENV_STORAGE_URI, ""))
    path = parse_source(source if source is not None else env.get(ENV_METADATA_LOC, ""))
    chosen = fmt if fmt is not None else env.get(ENV_FORMAT) or None
    if chosen is not None and chosen.lower() not in FORMATS:
        raise ConfigError(f"{ENV_FORMAT}={chosen!r}: must be one of {', '.join(FORMATS)}")
    if index is None:
        raw = env.get(ENV_INDEX, "0") or "0"
        if not raw.isdigit():
            raise ConfigError(f"{ENV_INDEX}={raw!r}: must be a non-negative integer")
        index = int(raw)
    peers = parse_peers(env.get(ENV_PEERS, ""))
    if index >= max(len(peers), 1):
        raise ConfigError(
            f"{ENV_INDEX}={index}: the cache has {max(len(peers), 1)} pod(s) ({ENV_PEERS})"
        )
    if not 0 <= port < 65536:
        raise ConfigError(f"--port {port}: must be 0-65535 (0: any free port)")
    return CacheConfig(
        schema=schema,
        table=name,
        source=path,
        format=chosen.lower() if chosen else None,
        index=index,
        peers=peers,
        port=port,
    )
