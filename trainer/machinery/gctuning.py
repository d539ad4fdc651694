"""CPython's cyclic garbage collector, set for processes that serve for long with large caches
(the API server, the controller, the local plane's executor): docs/local-plane.md,
"Python's garbage collector".

With the default thresholds a full collection runs each time the objects promoted to the oldest
generation since the last one reach a quarter of those in it. A watch cache replaces each
object it holds on every change, and every replacement is promoted, so with tens of thousands
of pods cached a full collection (a walk over every object) ran every few seconds: a sixth to a
quarter of the executor's and the API server's time at cluster scale (hack/bench/simulate.py).
What these processes keep is almost all acyclic JSON data, freed by reference counting the
moment it is replaced; the collector only finds the rare cycles. And a walk over every object
of a 2.5 GB heap holds the interpreter for seconds, during which nothing is served.

:func:`tune_for_serving` therefore:

- collects the young generations less often (``YOUNG_THRESHOLD`` new objects rather than
  700), so short-lived request data dies before it is promoted;
- runs no automatic full collection. Instead, every ``COLLECT_SECONDS`` a thread collects what
  was promoted since its last round and then freezes what survived (``gc.freeze``: moved
  where no collection walks it), so a round costs what the last minute kept, not the heap;
- every ``FULL_EVERY`` rounds it unfreezes first, so a cycle among objects frozen earlier is
  freed within ``COLLECT_SECONDS * FULL_EVERY`` (10 minutes). Frozen objects are still freed
  by reference counting the moment nothing refers to them.

Only the commands that serve call it (``trainer/cli/main.py``), never a process that imports
the package, such as a test run.
"""

from __future__ import annotations

import gc
import threading
import time

YOUNG_THRESHOLD = 20_000
COLLECT_SECONDS = 60.0
FULL_EVERY = 10
_NEVER = 2**31 - 1  # the third threshold counts young collections; this many never come

_started = threading.Lock()
_collector: list[threading.Thread] = []


def collect_round(round_number: int, full_every: int = FULL_EVERY) -> None:
    """One round of the collector thread (module docstring)."""
    if round_number % full_every == 0:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def _collect_forever(interval: float, full_every: int) -> None:
    rounds = 0
    while True:
        time.sleep(interval)
        rounds += 1
        collect_round(rounds, full_every)


def tune_for_serving(interval: float = COLLECT_SECONDS, full_every: int = FULL_EVERY) -> None:
    """Set this process's collector for long serving (module docstring); once per process."""
    with _started:
        if _collector:
            return
        _, middle, _ = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, middle, _NEVER)
        thread = threading.Thread(
            target=_collect_forever, args=(interval, full_every), name="gc-rounds", daemon=True
        )
        thread.start()
        _collector.append(thread)
