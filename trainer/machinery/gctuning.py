"""CPython's cyclic garbage collector, set for processes that serve for long with large caches
(the API server, the controller, the local plane's executor): docs/local-plane.md,
"Python's garbage collector".

With the default thresholds a full collection runs each time the objects promoted to the oldest
generation since the last one reach a quarter of those in it. A watch cache replaces each
object it holds on every change, and every replacement is promoted, so with tens of thousands
of pods cached a full collection (a walk over every object, half a second and more) ran every
few seconds: a sixth to a quarter of the executor's and the API server's time at cluster scale
(hack/bench/simulate.py). What these processes keep is almost all acyclic JSON data, freed by
reference counting the moment it is replaced; the collector only finds the rare cycles.
Measured there (2,500 TrainJobs on 100 simulated nodes): the executor spent 70 of its 260 CPU
seconds collecting, the API server 36 of 379; with this, 8 and 7.

:func:`tune_for_serving` therefore:

- collects the young generations less often (``YOUNG_THRESHOLD`` new objects rather than
  700), so short-lived request data dies before it is promoted;
- runs no automatic full collection, and instead one every ``FULL_COLLECTION_SECONDS`` from a
  daemon thread: cycles that outlive the young collections are freed within that time.
"""

from __future__ import annotations

import gc
import threading
import time

YOUNG_THRESHOLD = 20_000
FULL_COLLECTION_SECONDS = 60.0
_NEVER = 2**31 - 1  # the third threshold counts young collections; this many never come

_started = threading.Lock()
_collector: list[threading.Thread] = []


def _collect_forever(interval: float) -> None:
    while True:
        time.sleep(interval)
        gc.collect()


def tune_for_serving(interval: float = FULL_COLLECTION_SECONDS) -> None:
    """Set this process's collector for long serving (module docstring); once per process."""
    with _started:
        if _collector:
            return
        _, middle, _ = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, middle, _NEVER)
        thread = threading.Thread(
            target=_collect_forever, args=(interval,), name="full-gc", daemon=True
        )
        thread.start()
        _collector.append(thread)
