"""A bounded memo of CEL rule outcomes, for a validator that sees many similar objects.

CEL is pure: the outcome of one rule (passed, failed with the messageExpression's text, or an
evaluation error) is a function of the rule, the schema node that types the values, and the
values of ``self`` and ``oldSelf``, after projection on what the rule reads
(:mod:`.readset`). The API server validates hundreds of TrainJobs and JobSets that share most
of those projected values (the runtime reference, the trainer settings, the replicated jobs of
one runtime, a name across the updates of one object), so a memo saves most evaluations
(docs/local-plane.md, "Throughput").

Keys are exact, never a hash alone: the rule's place in the schema (its node and its entry),
the rule and message expression texts, and the :mod:`pickle` bytes of the projected values
(pickle records every type, key order and float bit for bit, so two values with the same bytes
convert to the same CEL values). A value that does not pickle, or whose bytes exceed
``max_key_bytes``, is not memoised: building its key would cost about what evaluating saves.

A memo belongs to one schema (the API server keeps one per served custom resource version and
drops it with the CRD), and assumes that schema is not changed in place while the memo lives:
a rule's place is the ``id`` of its schema node and of its ``x-kubernetes-validations`` entry,
and each memo entry holds both alive, so neither id can name another object meanwhile.
"""

from __future__ import annotations

import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Final

MAX_ENTRIES: Final = 4096
MAX_KEY_BYTES: Final = 8192

Outcome = tuple[str, str | None]
"""``("ok", None)``, ``("failed", messageExpression text or None)``, ``("error", text)``."""


def value_key(value: Any, limit: int) -> bytes | None:
    """The exact key bytes of a plain value; None if it cannot be keyed within ``limit``."""
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # an object pickle cannot write: evaluate it directly
        return None
    return data if len(data) <= limit else None


class RuleMemo:
    """Least-recently-used rule outcomes, at most ``max_entries``; safe across threads."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_key_bytes: int = MAX_KEY_BYTES) -> None:
        self.max_entries = max_entries
        self.max_key_bytes = max_key_bytes
        # Each entry also holds the objects named by ``id`` in its key (the rule's node and
        # entry in the schema), so those ids cannot be reused while the entry exists.
        self._entries: OrderedDict[Hashable, tuple[Outcome, object]] = OrderedDict()
        self._lock = threading.Lock()
        self._facts: dict[int, tuple[object, bool]] = {}  # by schema node: (node, fact)
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Outcome | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[0]

    def node_fact(self, node: object, compute: Callable[[object], bool]) -> bool:
        """``compute(node)`` once per node of this memo's schema (which has a bounded number)."""
        entry = self._facts.get(id(node))
        if entry is None or entry[0] is not node:
            entry = (node, compute(node))
            self._facts[id(node)] = entry
        return entry[1]

    def put(self, key: Hashable, outcome: Outcome, *, keep: object = None) -> None:
        """Remember ``outcome``; ``keep`` is held alive with it (what ``key`` names by id)."""
        with self._lock:
            self._entries[key] = (outcome, keep)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
