"""The collector set for serving (trainer/machinery/gctuning.py): young collections rarer, no
automatic full collection, and cycles that outlive the young ones still freed by the periodic
one. Run in a child process: the setting is process-wide."""

from __future__ import annotations

import subprocess
import sys

CHILD = r"""
import gc, threading, weakref
from trainer.machinery.gctuning import YOUNG_THRESHOLD, tune_for_serving

tune_for_serving(0.2)
tune_for_serving(0.2)  # once per process
assert gc.get_threshold()[0] == YOUNG_THRESHOLD and gc.get_threshold()[2] > 10**9
assert [t.name for t in threading.enumerate()].count("full-gc") == 1

class Node:
    pass

freed = threading.Event()
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle: reference counting alone never frees it
watch = weakref.ref(a, lambda _ref: freed.set())
gc.collect(1)  # promoted to the oldest generation, which nothing collects automatically
del a, b
print("freed" if freed.wait(10) else "kept")
"""


def test_a_cycle_in_the_oldest_generation_is_freed_by_the_periodic_collection() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "freed"
