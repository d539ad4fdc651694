"""The progress and metrics a TrainJob reported, kept while the dashboard watches it.

``status.trainerStatus`` holds only the latest report (each POST replaces it,
docs/status-server.md), so the curve of a metric exists only if someone records every
version: :class:`History` does, from the watch events of the TrainJob. A point is recorded
when the report changes; its time is when the dashboard saw it (``seen``, for reports that
arrive while it watches: ``lastUpdatedTime`` has whole seconds only, and two reports within a
second would share a time), else the report's ``lastUpdatedTime`` (the report that was there
when the dashboard started), else now. Times never go backwards within a series. Values that
are not numbers are not plotted. Each TrainJob keeps its last :data:`MAX_POINTS` reports; the
history of a deleted TrainJob is dropped.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from trainer.dashboard.policy.summary import epoch

MAX_POINTS = 500

Key = tuple[str, str]


@dataclass
class Series:
    last: Any = None
    """The last ``trainerStatus`` recorded (to see whether a new event changes it)."""
    points: deque[tuple[float, float | None, tuple[tuple[str, float], ...]]] = field(
        default_factory=lambda: deque(maxlen=MAX_POINTS)
    )


def _float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


class History:
    """Reports per TrainJob (``(namespace, name)``)."""

    def __init__(self) -> None:
        self._series: dict[Key, Series] = {}

    def record(self, key: Key, trainer_status: Any, seen: float | None = None) -> bool:
        """Record a report if it differs from the last one; True when a point was added."""
        if not isinstance(trainer_status, dict) or not trainer_status:
            return False
        series = self._series.setdefault(key, Series())
        if series.last == trainer_status:
            return False
        series.last = trainer_status
        when = seen or epoch(trainer_status.get("lastUpdatedTime")) or time.time()
        if series.points and when < series.points[-1][0]:
            when = series.points[-1][0]
        metrics = []
        for m in trainer_status.get("metrics") or []:
            if isinstance(m, dict):
                value = _float(m.get("value"))
                if value is not None:
                    metrics.append((str(m.get("name")), value))
        series.points.append(
            (when, _float(trainer_status.get("progressPercentage")), tuple(metrics))
        )
        return True

    def forget(self, key: Key) -> None:
        self._series.pop(key, None)

    def charts(self, key: Key) -> dict[str, Any]:
        """``{"progress": [[t, pct], ...], "metrics": {name: [[t, value], ...]}}``."""
        series = self._series.get(key)
        progress: list[list[float]] = []
        metrics: dict[str, list[list[float]]] = {}
        for when, pct, values in series.points if series else ():
            if pct is not None:
                progress.append([when, pct])
            for name, value in values:
                metrics.setdefault(name, []).append([when, value])
        return {"progress": progress, "metrics": metrics}

    def __len__(self) -> int:
        return len(self._series)
