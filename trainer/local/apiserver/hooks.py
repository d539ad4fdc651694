"""Test hooks of the local API server: a request log, fault injection and a clock."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

from trainer.machinery.times import format_time


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it (``resource`` is ``plural`` or ``plural/sub``)."""

    verb: str  # get, list, watch, create, update, patch, delete, deletecollection, ...
    group: str
    resource: str
    namespace: str
    name: str
    code: int
    field_manager: str = ""
    user_agent: str = ""
    path: str = ""
    """The URL path (tells non-resource requests such as discovery apart)."""

    @property
    def is_write(self) -> bool:
        return self.verb in ("create", "update", "patch", "delete", "deletecollection")


@dataclass
class Fault:
    """Answer ``code`` instead of serving the ``nth`` (1-based) matching request, ``times``
    times in a row, without changing state. ``resource`` may be ``plural`` or ``plural/sub``;
    ``*`` matches any verb or resource."""

    verb: str
    resource: str
    code: int
    nth: int = 1
    times: int = 1
    message: str = "injected fault"
    seen: int = 0
    fired: int = 0

    def matches(self, verb: str, resource: str) -> bool:
        return self.verb in ("*", verb) and self.resource in ("*", resource)


class Clock:
    """Wall clock with an adjustable offset (``advance``) or a fixed time (``set``)."""

    def __init__(self) -> None:
        self._offset = dt.timedelta()
        self._fixed: dt.datetime | None = None

    def now(self) -> dt.datetime:
        if self._fixed is not None:
            return self._fixed
        return dt.datetime.now(dt.UTC).replace(microsecond=0) + self._offset

    def advance(self, seconds: float) -> None:
        if self._fixed is not None:
            self._fixed += dt.timedelta(seconds=seconds)
        else:
            self._offset += dt.timedelta(seconds=seconds)

    def set(self, when: dt.datetime | None) -> None:
        self._fixed = when

    def timestamp(self) -> str:
        return format_time(self.now())


LOG_LIMIT = 50_000
"""Request records kept: past it the oldest half is dropped, so a long-running ``trainer up``
or ``trainer apiserver`` keeps a bounded log (a test sees every request of its own run)."""


@dataclass
class Hooks:
    log: list[RequestRecord] = field(default_factory=list)
    log_limit: int = LOG_LIMIT
    faults: list[Fault] = field(default_factory=list)
    clock: Clock = field(default_factory=Clock)
    keep_log: bool = True
    on_request: list[Callable[[RequestRecord], None]] = field(default_factory=list)

    def inject(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def fault_for(self, verb: str, resource: str) -> Fault | None:
        for fault in self.faults:
            if not fault.matches(verb, resource) or fault.fired >= fault.times:
                continue
            fault.seen += 1
            if fault.seen >= fault.nth:
                fault.fired += 1
                return fault
        return None

    def record(self, rec: RequestRecord) -> None:
        if self.keep_log:
            self.log.append(rec)
            if len(self.log) > self.log_limit:
                del self.log[: len(self.log) - self.log_limit // 2]
        for hook in self.on_request:
            hook(rec)

    def writes(self) -> list[RequestRecord]:
        return [r for r in self.log if r.is_write]
