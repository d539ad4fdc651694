"""Listening sockets for the project's HTTP servers (the webhook, the status server and the
dashboard), bound before the server starts so that ``port=0`` gives a port the caller can read
and print. Standard library only, so that every server, lean ones included, can use it."""

from __future__ import annotations

import socket


def bind_socket(
    host: str, port: int, *, backlog: int = 2048, dual_stack: bool = False
) -> socket.socket:
    """A listening, non-blocking TCP socket on ``host``:``port`` (``port=0``: any free port);
    with ``dual_stack`` an IPv6 socket also takes IPv4 connections (``host`` ``::``: every
    interface of both families)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say they are
    # TCP, and accepted sockets inherit it. Without NODELAY, uvicorn's separate writes of the
    # response head and body meet Nagle and the peer's delayed ACK: 40 ms per request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if dual_stack and family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
