"""machinery.nulls: explicit nulls read as "not set" wherever data is compared or applied."""

from __future__ import annotations

from trainer.machinery.nulls import drop_nulls


def test_drops_null_map_values_at_every_depth() -> None:
    data = {"a": None, "b": {"c": None, "d": 1}, "e": [{"f": None, "g": "x"}]}
    assert drop_nulls(data) == {"b": {"d": 1}, "e": [{"g": "x"}]}


def test_keeps_null_list_items_and_scalars() -> None:
    assert drop_nulls([None, 1, "s"]) == [None, 1, "s"]
    assert drop_nulls(None) is None
    assert drop_nulls(0) == 0


def test_result_is_a_fresh_copy() -> None:
    inner = {"k": [1, 2]}
    data = {"inner": inner, "gone": None}
    out = drop_nulls(data)
    out["inner"]["k"].append(3)
    assert inner == {"k": [1, 2]} and data == {"inner": inner, "gone": None}
