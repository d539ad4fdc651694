"""How the long-running commands (``up``, ``run``, ``apiserver``, ``controller``, ``webhook``,
``dashboard``) learn that they should stop: SIGINT or SIGTERM sets an event on the running
loop, and the command shuts down cleanly instead of dying in the middle of a write."""

from __future__ import annotations

import asyncio
import signal


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM; call it from inside the running loop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
