"""Explicit ``null`` in JSON data: where Kubernetes reads it as "not set".

Go decodes ``"field": null`` into the zero value, so a ``null`` map value says nothing an
absent key does not. Two places compare or apply data in that light and drop the nulls first:
admission compares a TrainJob's runtime patches by content (a patch that spells a field as
``null`` is the same change as one that leaves it out), and the local API server's
server-side apply reads an apply configuration (where ``null`` is not a value to own).

Only map values are dropped; a ``null`` list item stays (it is data, and the schema rejects
it where it must). JSON merge patch and strategic merge give ``null`` its other meaning,
"delete this key", and do not use this.
"""

from __future__ import annotations

from typing import Any


def drop_nulls(value: Any) -> Any:
    """A copy of the JSON value ``value`` without ``null`` map values, at every depth.

    Every map and list of the result is new; scalars are shared (JSON scalars are
    immutable)."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value
