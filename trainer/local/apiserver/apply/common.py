"""Server-side apply: the names every part shares (the path type, the operations, the metadata
nobody owns, the marker of an absent value)."""

from __future__ import annotations

from typing import Final

Path = tuple[str, ...]
"""A field path: path elements such as ``("f:spec", "k:{\\"name\\":\\"a\\"}", "f:image")``."""

APPLY: Final = "Apply"
UPDATE: Final = "Update"
BEFORE_FIRST_APPLY: Final = "before-first-apply"
"""Manager that receives every existing field when an object without managedFields is applied."""

CURRENT_OPERATION: Final = "\x00current-operation"
"""Identity of an Update in progress; it never matches a stored manager."""

SYSTEM_META: Final = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)
"""Identity and server-set metadata: kept from the live object when a configuration leaves
them out."""

STRIPPED: Final[frozenset[Path]] = frozenset(
    {("f:apiVersion",), ("f:kind",), ("f:metadata",)}
    | {("f:metadata", f"f:{key}") for key in (*SYSTEM_META, "clusterName", "managedFields")}
)
"""Paths nobody owns: identity and server-managed metadata (exact paths, not subtrees)."""


class _Missing:
    """Marks an absent value (distinct from JSON ``null``)."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Final = _Missing()
