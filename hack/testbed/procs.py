"""Processes, ports and readiness for the test bed (docs/testbed.md).

Every program runs in a session of its own with its output in a log file; stopping the bed
ends each session (SIGTERM, then SIGKILL after a grace period), so nothing outlives it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class BedError(RuntimeError):
    """The bed could not start: names the program, the step and its last lines of output."""


def free_port() -> int:
    """A port nobody listens on now; a program that then fails to bind it is started again on
    another (:func:`start_with_port`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no output)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(no output)"


@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes]
    ports: dict[str, int] = field(default_factory=dict)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def died(self, step: str) -> BedError:
        return BedError(
            f"{self.name}: {step}: exited with code {self.popen.returncode}; "
            f"last lines of {self.log}:\n{tail(self.log)}"
        )

    def stop(self, grace: float = 10.0) -> None:
        if self.popen.poll() is not None:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()


def start(name: str, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> Proc:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        popen = subprocess.Popen(
            list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None, start_new_session=True,
        )  # fmt: skip
    return Proc(name, list(argv), log, popen)


def _address_in_use(log: Path) -> bool:
    text = tail(log, 40).lower()
    return "address already in use" in text or "bind: address" in text


def start_with_port(
    name: str,
    build: Callable[[dict[str, int]], tuple[list[str], Mapping[str, str] | None]],
    port_names: Sequence[str],
    log: Path,
    ready: Callable[[Proc], None],
    attempts: int = 3,
) -> Proc:
    """Start a program on free ports and wait for ``ready``; when it died because a port was
    taken meanwhile, start it again on other ports."""
    for attempt in range(attempts):
        ports = {p: free_port() for p in port_names}
        argv, env = build(ports)
        proc = start(name, argv, log, env)
        proc.ports = ports
        try:
            ready(proc)
            return proc
        except BedError:
            proc.stop(2)
            if attempt + 1 < attempts and _address_in_use(log):
                with log.open("a") as out:
                    out.write(f"\n--- testbed: a port was taken; starting {name} again ---\n")
                continue
            raise
    raise BedError(f"{name}: no free port after {attempts} attempts")


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    proc: Proc | None = None,
    interval: float = 0.1,
) -> None:
    """Poll a program we do not control until ``check`` holds (its readiness endpoint, an
    object it writes); fail early with its output when it exits."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and not proc.alive():
            raise proc.died(what)
        try:
            if check():
                return
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
        if time.monotonic() > deadline:
            detail = f"; last lines of {proc.log}:\n{tail(proc.log)}" if proc else ""
            name = proc.name if proc else "testbed"
            raise BedError(f"{name}: {what}: not ready after {timeout:.0f} s{detail}")
        time.sleep(interval)


def https_ok(url: str, cert: tuple[Path, Path] | None = None, ca: Path | None = None) -> bool:
    context = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except urllib.error.HTTPError:
        return False
