"""JSON decoding of what the API answers: orjson, which decodes a watch event in about half
the time the standard library takes (a controller decodes every event of every watch it
holds; docs/side-by-side.md, "The benchmark"). The standard library decodes what orjson
refuses to (an integer beyond 64 bits, which JSON allows), and words the error for input that
is not JSON at all."""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """The JSON value of ``data``; :class:`ValueError` (json.JSONDecodeError) when it is not
    JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)
