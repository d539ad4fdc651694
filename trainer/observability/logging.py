"""Structured, one-line logs for the controller, the webhook and the local control plane.

Every record becomes exactly one line, either logfmt-style ``key=value`` pairs (``fmt="text"``)
or one JSON object (``fmt="json"``), with a fixed head (``ts``, ``level``, ``logger``, ``msg``)
followed by the record's structured fields. Fields are passed the standard-library way::

    log.info("Reconciled", extra={"key": "default/mnist", "duration": 0.012})

or bound once with :func:`with_fields` (``log = with_fields(log, controller="trainjob")``). The
object key goes in the ``key`` field (``namespace/name``), as controller-runtime does.

Secret material never reaches the output: fields whose *name* looks secret (token, password,
secret, private key, ...) are replaced by ``[REDACTED]``, PEM private-key blocks and bearer
tokens are cut out of every string (message, field values, tracebacks), and the ``data`` /
``stringData`` of anything that looks like a Secret object is dropped. Newlines in messages and
tracebacks are escaped, so one event is always one line. Terminal escape sequences (colours,
cursor movement) are removed from every string, and uvicorn's ``color_message`` field (its
message again, coloured for a terminal) is dropped: structured output is read by programs and
log stores, where escapes are noise.

Repeated warnings and errors are rate-limited (:class:`RepeatFilter`, on the handler
:func:`setup_logging` installs): the same record (logger, level, message, exception) is written
once per :data:`REPEAT_INTERVAL_SECONDS`; the next one written after that carries
``suppressed=N``, the number of identical records left out in between. A failure that repeats
thousands of times a second (a listener out of file descriptors) is then one line a minute, not
a log that fills the disk (docs/local-plane.md, "Listeners under abuse").
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Mapping, MutableMapping
from typing import IO, Any, Literal

from trainer.machinery.times import format_micro_time

Format = Literal["text", "json"]
FORMATS: tuple[Format, ...] = ("text", "json")
REDACTED = "[REDACTED]"

# Attributes every LogRecord has; anything else on a record is a structured field.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)
# Field names whose values are secret. Deliberately not plain "key": that is the object key.
_SECRET_NAME = re.compile(
    r"(pass(word|wd)?|secret|token|authorization|credential|private[_-]?key|api[_-]?key|"
    r"ssh[_-]?key|tls\.key|ca\.key|cookie)",
    re.IGNORECASE,
)
_PEM_PRIVATE = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
    re.DOTALL,
)
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")
# ECMA-48 escape sequences: CSI (colours, cursor), OSC (titles, links; ended by BEL or ST), and
# the two-character ones; then any ESC left over, so none reaches the output.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]|\x1b"
    r"|\x9b[0-?]*[ -/]*[@-~]|\x9b"
)
# Extra fields that only repeat the message for a terminal: uvicorn adds ``color_message``, its
# message with ANSI colours (uvicorn/server.py and uvicorn/config.py, for uvicorn's own
# ColourizedFormatter).
_TERMINAL_ONLY_FIELDS = frozenset({"color_message"})
_SAFE_BARE = re.compile(r"^[A-Za-z0-9_./:@%+,()\[\]{}<>*#!?&|^~$-]+$")

_LEVEL_NAMES = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "dpanic": logging.CRITICAL,
    "panic": logging.CRITICAL,
    "fatal": logging.CRITICAL,
    "critical": logging.CRITICAL,
}


def parse_level(level: str | int) -> int:
    """A logging level from a name (``debug``, ``info``, ``warn``, ``error``, ...) or from
    zap's ``--zap-log-level`` integers: ``0`` is info and any integer above 0 (a more verbose
    debug level in zap) is debug. Raises ValueError naming what is accepted."""
    if isinstance(level, int):
        return logging.DEBUG if level > 0 else logging.INFO
    text = level.strip().lower()
    if text in _LEVEL_NAMES:
        return _LEVEL_NAMES[text]
    try:
        number = int(text)
    except ValueError:
        raise ValueError(
            f"invalid log level {level!r}: use one of debug, info, warn, error, "
            "or an integer >= 0 (zap verbosity: above 0 is debug)"
        ) from None
    if number < 0:
        raise ValueError(f"invalid log level {level!r}: integer levels must be >= 0")
    return logging.DEBUG if number > 0 else logging.INFO


def redact_text(text: str) -> str:
    """``text`` without terminal escape sequences, and with PEM private-key blocks and bearer
    tokens replaced by ``[REDACTED]`` (escapes go first: one inside a token would hide it)."""
    if "\x1b" in text or "\x9b" in text:
        text = _ANSI.sub("", text)
    if "PRIVATE KEY" in text:
        text = _PEM_PRIVATE.sub(REDACTED, text)
    if "earer" in text or "EARER" in text:
        text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    return text


def redact(value: Any, name: str = "") -> Any:
    """A copy of ``value`` safe to log: secret-looking field names are redacted, strings are
    scrubbed with :func:`redact_text`, and Secret objects lose their ``data``/``stringData``."""
    if name and _SECRET_NAME.search(name):
        return REDACTED
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        is_secret = value.get("kind") == "Secret"
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            if is_secret and key in ("data", "stringData"):
                out[key] = REDACTED
            else:
                out[key] = redact(v, key)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(v) for v in value]
    return value


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured content of ``record``, in output order: ``ts``, ``level``, ``logger``,
    ``msg``, the record's extra fields, then ``error``/``stacktrace`` for an exception. All
    values are redacted."""
    fields: dict[str, Any] = {
        "ts": format_micro_time(record.created),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": redact_text(record.getMessage()),
    }
    for name, value in vars(record).items():
        if name in _STANDARD_ATTRS or name.startswith("_") or name in fields:
            continue
        if name in _TERMINAL_ONLY_FIELDS:
            continue
        fields[name] = redact(value, name)
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        fields.setdefault("error", redact_text(f"{type(exc).__name__}: {exc}"))
        stack = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        fields["stacktrace"] = redact_text(stack)
    elif record.exc_text:
        fields["stacktrace"] = redact_text(record.exc_text)
    if record.stack_info:
        fields["stack"] = redact_text(record.stack_info)
    return fields


def _text_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        text = value
    elif isinstance(value, Mapping | list):
        text = json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
    else:
        text = str(value)
    if _SAFE_BARE.match(text):
        return text
    return json.dumps(text, ensure_ascii=False)


def _text_key(name: str) -> str:
    return name if _SAFE_BARE.match(name) and "=" not in name else json.dumps(name)


class TextFormatter(logging.Formatter):
    """``ts=... level=info logger=... msg="..." key=ns/name ...`` on one line (logfmt)."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(
            f"{_text_key(k)}={_text_value(v)}" for k, v in record_fields(record).items()
        )


class JSONFormatter(logging.Formatter):
    """One JSON object per line, the same fields as :class:`TextFormatter`."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(record_fields(record), ensure_ascii=False, default=str)


def formatter(fmt: Format) -> logging.Formatter:
    """The formatter for ``fmt`` (``text`` or ``json``)."""
    if fmt == "json":
        return JSONFormatter()
    if fmt == "text":
        return TextFormatter()
    raise ValueError(f"invalid log format {fmt!r}: use one of {', '.join(FORMATS)}")


REPEAT_INTERVAL_SECONDS = 60.0
REPEAT_MIN_LEVEL = logging.WARNING
"""Info and debug records are never suppressed: they are not repeated failures."""
REPEAT_MAX_KEYS = 1024
"""Distinct records remembered; the least recently written are forgotten first."""


class RepeatFilter(logging.Filter):
    """Lets a warning or error through once per ``interval`` seconds: identical ones in
    between are counted, and the next one let through carries the count as ``suppressed``."""

    def __init__(
        self,
        interval: float = REPEAT_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, int, str, str], list[float]] = OrderedDict()
        """key -> [when it was last let through, how many were suppressed since]."""

    @staticmethod
    def _key(record: logging.LogRecord) -> tuple[str, int, str, str]:
        try:
            message = record.getMessage()
        except Exception:  # bad arguments: logging reports those itself
            message = str(record.msg)
        error = ""
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            error = f"{type(exc).__name__}: {exc}"
        return record.name, record.levelno, message, error

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < REPEAT_MIN_LEVEL:
            return True
        key = self._key(record)
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen[0] < self.interval:
                seen[1] += 1
                return False
            if seen is not None and seen[1]:
                record.suppressed = int(seen[1])
            self._seen[key] = [now, 0]
            self._seen.move_to_end(key)
            while len(self._seen) > REPEAT_MAX_KEYS:
                self._seen.popitem(last=False)
        return True


_HANDLER_MARK = "_trainer_structured"


def setup_logging(
    level: str | int = "info",
    fmt: Format = "text",
    *,
    stream: IO[str] | None = None,
    logger: str = "",
) -> logging.Handler:
    """Send ``logger`` (the root logger by default) to ``stream`` (stderr by default) as
    structured one-line records at ``level`` (see :func:`parse_level`), repeated warnings and
    errors rate-limited (:class:`RepeatFilter`).

    Calling it again replaces the handler it installed before (so tests and the CLI can switch
    format), and leaves other handlers alone. Returns the installed handler.
    """
    target = logging.getLogger(logger)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter(fmt))
    handler.addFilter(RepeatFilter())
    setattr(handler, _HANDLER_MARK, True)
    for old in list(target.handlers):
        if getattr(old, _HANDLER_MARK, False):
            target.removeHandler(old)
            old.close()
    target.addHandler(handler)
    target.setLevel(parse_level(level))
    # kubernetes_asyncio logs every response body at debug, Secrets' keys included (base64,
    # which redact_text cannot recognise): never below info, whatever the level asked for.
    logging.getLogger("kubernetes_asyncio.client.rest").setLevel(
        max(parse_level(level), logging.INFO)
    )
    return handler


class FieldsAdapter(logging.LoggerAdapter[logging.Logger]):
    """A logger with bound fields; a call's own ``extra`` is merged over them."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        bound = dict(self.extra or {})
        bound.update(kwargs.get("extra") or {})
        kwargs["extra"] = bound
        return msg, kwargs


def with_fields(logger: logging.Logger | FieldsAdapter, **fields: Any) -> FieldsAdapter:
    """``logger`` with ``fields`` attached to every record it emits (nesting accumulates)."""
    if isinstance(logger, FieldsAdapter):
        merged = {**dict(logger.extra or {}), **fields}
        return FieldsAdapter(logger.logger, merged)
    return FieldsAdapter(logger, fields)
