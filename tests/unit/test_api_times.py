"""trainer.machinery.times: the two timestamp shapes Go writes, from every input the layers pass."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from trainer.machinery import times

EPOCH = 1714557600.123456  # 2024-05-01T10:00:00.123456Z


def test_time_is_seconds_utc_with_z() -> None:
    assert times.time_from_epoch(EPOCH) == "2024-05-01T10:00:00Z"
    assert times.time_from_epoch(0) == "1970-01-01T00:00:00Z"


def test_format_time_converts_other_zones_to_utc() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))
    when = dt.datetime(2024, 5, 1, 12, 0, 0, 999_999, tzinfo=plus_two)
    assert times.format_time(when) == "2024-05-01T10:00:00Z"


def test_micro_time_keeps_six_digits() -> None:
    assert times.format_micro_time(EPOCH) == "2024-05-01T10:00:00.123456Z"
    assert times.format_micro_time(0) == "1970-01-01T00:00:00.000000Z"


def test_now_is_a_time_close_to_the_clock() -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    stamp = times.now()
    after = dt.datetime.now(dt.UTC)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    parsed = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    assert before <= parsed <= after


def test_parse_reads_both_shapes_back() -> None:
    assert times.parse_time("2024-05-01T10:00:00Z") == dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC)
    micro = times.parse_time(times.format_micro_time(EPOCH))
    assert micro is not None and micro.timestamp() == EPOCH


def test_parse_without_value_or_offset() -> None:
    assert times.parse_time(None) is None and times.parse_time("") is None
    assert times.parse_time("2024-05-01T10:00:00") == dt.datetime(2024, 5, 1, 10, tzinfo=dt.UTC)


def test_parse_rejects_text_that_is_not_a_time() -> None:
    with pytest.raises(ValueError):
        times.parse_time("yesterday")
