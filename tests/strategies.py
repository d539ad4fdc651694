"""Hypothesis strategies that generate wire data for any API model, with unknown fields
sprinkled in at every level (the round-trip property must hold for fields we never model)."""

from __future__ import annotations

from typing import Any, get_args, get_origin

from hypothesis import strategies as st
from pydantic import BaseModel

from trainer.api.crds import _unwrap

JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**31), max_value=2**31),
    st.text(max_size=8),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(min_size=1, max_size=6), inner, max_size=3),
    ),
    max_leaves=6,
)
# Unknown keys are prefixed so they never collide with a modelled wire name.
UNKNOWN_KEYS = st.text(alphabet="abcdefxyz", min_size=1, max_size=6).map(lambda s: "zz" + s)


def _for_type(tp: Any, depth: int) -> st.SearchStrategy[Any]:
    if isinstance(tp, tuple):
        return st.one_of(*(_for_type(t, depth) for t in tp))
    if tp is Any:
        return JSON_VALUES
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return wire_data(tp, depth + 1)
    if tp is str:
        return st.text(max_size=10)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers(min_value=0, max_value=1000)
    if tp is float:
        return st.floats(allow_nan=False, allow_infinity=False, width=32)
    origin = get_origin(tp)
    if origin is list:
        item, _ = _unwrap(get_args(tp)[0])
        return st.lists(_for_type(item, depth + 1), max_size=2 if depth < 6 else 0)
    if origin is dict:
        value, _ = _unwrap(get_args(tp)[1])
        return st.dictionaries(st.text(min_size=1, max_size=6), _for_type(value, depth), max_size=2)
    raise TypeError(f"no strategy for {tp!r}")


def wire_data(model: type[BaseModel], depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Wire dicts for ``model``: required fields always, optional ones at random, plus unknown
    fields with arbitrary JSON values."""
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for name, info in model.model_fields.items():
        wire = info.serialization_alias or info.alias or name
        tp, _ = _unwrap(info.annotation)
        strategy = _for_type(tp, depth)
        if info.is_required():
            required[wire] = strategy
        elif depth < 8:
            optional[wire] = strategy
    base = st.fixed_dictionaries(required, optional=optional)
    extras = st.dictionaries(UNKNOWN_KEYS, JSON_VALUES, max_size=2)
    return st.builds(lambda known, unknown: {**unknown, **known}, base, extras)
