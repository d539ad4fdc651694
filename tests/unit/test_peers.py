"""Who the status server counts a connection as (trainer/statusserver/peers.py,
docs/status-server.md, "One client cannot delay another"): on loopback the user owning the peer's
socket, whatever loopback address it binds; elsewhere the address (an IPv6 host by its /64)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainer.statusserver.peers import client_key, socket_owner

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
linux_only = pytest.mark.skipif(
    not Path("/proc/net/tcp").exists(), reason="needs /proc/net/tcp (Linux)"
)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(20)
    yield server
    server.close()


@linux_only
async def test_a_loopback_peer_is_its_user(listener: socket.socket) -> None:
    client = socket.create_connection(listener.getsockname())
    conn, peer = listener.accept()
    with client, conn:
        assert socket_owner(peer, conn.getsockname()) == os.getuid()
        assert await client_key(peer, conn.getsockname()) == f"uid:{os.getuid()}"
        assert socket_owner(("127.0.0.1", 1), conn.getsockname()) is None


@linux_only
async def test_ipv6_loopback_peer() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    server = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        server.bind(("::1", 0))
    except OSError:
        server.close()
        pytest.skip("no IPv6 loopback address")
    with server:
        server.listen()
        client = socket.create_connection(server.getsockname()[:2])
        conn, peer = server.accept()
        with client, conn:
            key = await client_key(peer[:2], conn.getsockname()[:2])
            assert key == f"uid:{os.getuid()}"


@linux_only
async def test_another_user_is_another_client_from_any_loopback_address(
    listener: socket.socket,
) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to connect as a second user (uid 65534)")
    port = listener.getsockname()[1]
    # The other user binds 127.0.0.2 as its source: a new address is not a new client.
    connect = (
        "import socket, sys\n"
        "s = socket.socket(); s.bind(('127.0.0.2', 0))\n"
        f"s.connect(('127.0.0.1', {port})); print('connected', flush=True)\n"
        "sys.stdin.read()\n"
    )
    other = subprocess.Popen(
        [*NOBODY, sys.executable, "-I", "-c", connect],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == "connected\n"
        conn, peer = listener.accept()
        with conn:
            assert peer[0] == "127.0.0.2"
            assert await client_key(peer, conn.getsockname()) == "uid:65534"
    finally:
        other.communicate("", timeout=20)


@pytest.mark.parametrize(
    ("peer", "key"),
    [
        (("10.1.2.3", 40000), "ip:10.1.2.3"),
        (("::ffff:10.1.2.3", 40000), "ip:10.1.2.3"),
        (("2001:db8:1:2:aaaa::1", 40000), "ip:2001:db8:1:2::/64"),
        (("2001:db8:1:2:bbbb::9", 40001), "ip:2001:db8:1:2::/64"),
        (("2001:db8:1:3::1", 40000), "ip:2001:db8:1:3::/64"),
        (("testclient", 50000), "host:testclient"),
        (None, "unknown"),
    ],
)
async def test_remote_peers_are_their_address(peer: tuple[str, int] | None, key: str) -> None:
    assert await client_key(peer, ("10.0.0.1", 10443)) == key


async def test_loopback_without_the_connection_table_is_one_client() -> None:
    # A connection that is not (or no longer) in the table: all such peers are one client.
    assert await client_key(("127.0.0.9", 1), ("127.0.0.1", 2)) == "loopback"
    assert await client_key(("::1", 1), None) == "loopback"
