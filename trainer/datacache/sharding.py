"""Row ranges: how a table is split over the cache pods and over the training ranks.

Both splits are the same rule, contiguous and as even as possible: ``n`` rows over ``k``
holders give holder ``i`` the rows ``[i * n // k, (i + 1) * n // k)``. So the parts are
disjoint, cover every row exactly once and differ in size by at most one row. A rank's shard
is cut from the parts that hold its rows (:func:`pieces`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RowRange:
    """Rows ``[start, stop)`` of a table."""

    start: int
    stop: int

    @property
    def length(self) -> int:
        return self.stop - self.start

    def intersect(self, other: RowRange) -> RowRange | None:
        start, stop = max(self.start, other.start), min(self.stop, other.stop)
        return RowRange(start, stop) if start < stop else None


def split(rows: int, holders: int) -> list[RowRange]:
    """``rows`` split into ``holders`` contiguous ranges (see the module docstring)."""
    if rows < 0:
        raise ValueError(f"rows must not be negative (got {rows})")
    if holders < 1:
        raise ValueError(f"holders must be at least 1 (got {holders})")
    return [RowRange(i * rows // holders, (i + 1) * rows // holders) for i in range(holders)]


def part_of(rows: int, holders: int, index: int) -> RowRange:
    """The range holder ``index`` of ``holders`` keeps."""
    if not 0 <= index < holders:
        raise ValueError(f"index {index} is outside 0..{holders - 1}")
    return split(rows, holders)[index]


def pieces(parts: list[RowRange], wanted: RowRange) -> list[tuple[int, RowRange]]:
    """The (part index, rows) pieces that together make ``wanted``, in row order."""
    out: list[tuple[int, RowRange]] = []
    for i, part in enumerate(parts):
        piece = part.intersect(wanted)
        if piece is not None:
            out.append((i, piece))
    return out
