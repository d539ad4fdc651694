"""Who is at the other end of a connection, as the key the status server shares its API
budget by (docs/status-server.md, "One client cannot delay another").

- A remote peer is its address: an IPv4 address, or the /64 of an IPv6 one (a host is
  routinely given a whole /64, so single IPv6 addresses would let one host be many clients).
- A loopback peer (the local plane: every pod and every other user of the machine connects
  from 127.0.0.1) is the user that owns the peer's socket, read from ``/proc/net/tcp`` /
  ``tcp6`` (the ``uid`` column of the connection whose local end is the peer). Another user
  cannot pose as the plane's user, nor become many clients by binding 127.0.0.2, 127.0.0.3,
  ... Where that table cannot be read (not Linux), all loopback peers are one client.
"""

from __future__ import annotations

import asyncio
import ipaddress
import sys
from pathlib import Path

PROC_NET = Path("/proc/net")
ESTABLISHED = "01"


def _proc_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    """``ip``:``port`` as ``/proc/net/tcp{,6}`` prints it: each 32-bit word of the address
    as the kernel stores it (network order) printed as a native integer, then the port."""
    raw = ip.packed
    words = [int.from_bytes(raw[i : i + 4], sys.byteorder) for i in range(0, len(raw), 4)]
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def _as_ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def socket_owner(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid owning the established TCP socket whose local end is ``peer`` and remote end
    ``local`` (a connection we accepted from a process on this host); None when unknown."""
    peer_ip, local_ip = _as_ip(peer[0]), _as_ip(local[0])
    if peer_ip is None or local_ip is None:
        return None
    if peer_ip.version != local_ip.version:
        return None
    table = "tcp" if peer_ip.version == 4 else "tcp6"
    needle = f" {_proc_address(peer_ip, peer[1])} {_proc_address(local_ip, local[1])} "
    try:
        text = (PROC_NET / table).read_text()
    except OSError:
        return None
    at = text.find(needle)
    if at < 0:
        return None
    end = text.find("\n", at)
    line = text[at : end if end >= 0 else None].split()
    # local_address rem_address st tx:rx tr:when retrnsmt uid ...
    if len(line) < 7 or line[2] != ESTABLISHED or not line[6].isdigit():
        return None
    return int(line[6])


def _unmapped(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


async def client_key(peer: tuple[str, int] | None, local: tuple[str, int] | None) -> str:
    """The key of the client at ``peer`` of a connection accepted on ``local``."""
    if peer is None:
        return "unknown"
    ip = _as_ip(peer[0])
    if ip is None:
        return f"host:{peer[0]}"
    if _unmapped(ip).is_loopback:
        owner = None
        if local is not None:
            # /proc/net/tcp grows with every socket of the host: read it off the event loop.
            owner = await asyncio.to_thread(socket_owner, peer, local)
        return "loopback" if owner is None else f"uid:{owner}"
    ip = _unmapped(ip)
    if isinstance(ip, ipaddress.IPv6Address):
        return f"ip:{ipaddress.IPv6Network((ip, 64), strict=False)}"
    return f"ip:{ip}"


class Peer:
    """The client of one request, worked out when first asked (a request refused on its
    token alone never costs a look at the connection table)."""

    def __init__(self, peer: tuple[str, int] | None, local: tuple[str, int] | None) -> None:
        self.peer = peer
        self.local = local
        self._key: str | None = None

    async def key(self) -> str:
        if self._key is None:
            self._key = await client_key(self.peer, self.local)
        return self._key
