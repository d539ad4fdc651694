"""Termination messages, as the kubelet makes them (docs/local-plane.md, "Termination
messages"; https://kubernetes.io/docs/tasks/debug/debug-application/determine-reason-pod-failure/).

A container's termination message is what it wrote to the file at its
``terminationMessagePath`` (default ``/dev/termination-log``), read once it exited, at most
4096 bytes (the kubelet's ``MaxContainerTerminationMessageLength``). Only when that file is
empty, the container failed (exit code not 0) and its ``terminationMessagePolicy`` is
``FallbackToLogsOnError`` is the message the tail of its log instead (the last 80 lines, at most
2048 bytes: :meth:`~trainer.local.executor.kubelet.logsink.LogSink.termination_message`). The
kubelet then keeps the messages of a pod within 12 KiB: with more than three containers (init
containers counted) each message is cut to 12 KiB divided by their number.

On a cluster the kubelet bind-mounts a fresh file of the pod's directory at that path for each
run of the container. The local kubelet gives each run an empty file of the pod's own directory
(``<state_dir>/<ns>/<pod>/containers/<container>/termination-log``) and maps the path to it as
it maps mount paths (:mod:`~trainer.local.executor.kubelet.policy.rewrites`): in the command, args
and env values, so ``echo done > /dev/termination-log`` in a shell command writes that file; the
process also gets its host path as ``TRAINER_LOCAL_TERMINATION_LOG``. A program that opens the
literal path itself cannot be redirected here (``/dev`` is this host's).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer.local.executor.kubelet.policy.volumes import pod_dir

DEFAULT_PATH = "/dev/termination-log"
MESSAGE_BYTES = 4096
"""At most this much of the file is read (``MaxContainerTerminationMessageLength``)."""
POD_MESSAGE_BYTES = 12 * 1024
"""All of a pod's messages together (``MaxPodTerminationMessageLogLength``)."""
ENV = "TRAINER_LOCAL_TERMINATION_LOG"
"""The host path of the file the container's termination message is read from."""
FALLBACK = "FallbackToLogsOnError"


def message_path(container: Mapping[str, Any]) -> str:
    """Where the container writes its message (the API server defaults the field; a pod
    written without defaults gets the default here)."""
    return str(container.get("terminationMessagePath") or DEFAULT_PATH)


def host_file(state_dir: Path | str, pod: Mapping[str, Any], container: str) -> Path:
    """The file of the pod's directory that stands for the container's message path."""
    return pod_dir(state_dir, dict(pod)) / "containers" / container / "termination-log"


def prepare(path: Path) -> None:
    """An empty file for a new run (the kubelet makes a new one per container it starts)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
    os.close(fd)


def read_file(path: Path) -> str:
    """The first :data:`MESSAGE_BYTES` of the file (``""`` when there is none); bytes that are
    not UTF-8 are replaced, as the API server's JSON would replace them."""
    data = b""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            data = os.read(fd, MESSAGE_BYTES)
        finally:
            os.close(fd)
    return data.decode(errors="replace")


def message(container: Mapping[str, Any], *, exit_code: int, file_text: str, log_tail: str) -> str:
    """The terminated state's message: the file's text, else (``FallbackToLogsOnError`` and a
    failure only) the log's tail."""
    if file_text:
        return file_text
    if container.get("terminationMessagePolicy") == FALLBACK and exit_code != 0:
        return log_tail
    return ""


def limit_pod_messages(statuses: Sequence[dict[str, Any]]) -> None:
    """Cut every ``state``/``lastState`` ``terminated.message`` of a pod's container statuses
    (init and regular) to :data:`POD_MESSAGE_BYTES` divided by their number, in place, as the
    kubelet's status manager does before it writes the status."""
    if not statuses:
        return
    share = POD_MESSAGE_BYTES // len(statuses)
    for status in statuses:
        for field in ("state", "lastState"):
            terminated = (status.get(field) or {}).get("terminated") or {}
            text = terminated.get("message")
            if isinstance(text, str) and len(text.encode()) > share:
                cut = text.encode()[:share].decode(errors="ignore")
                status[field] = {**status[field], "terminated": {**terminated, "message": cut}}
