"""The collector set for serving (trainer/machinery/gctuning.py): young collections rarer, no
automatic full collection, and cycles still freed by the collector's rounds, those frozen by an
earlier round at the next unfreezing one. Run in child processes: the setting is process-wide,
and only the serving commands set it."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = r"""
import gc, threading, weakref
from trainer.machinery.gctuning import YOUNG_THRESHOLD, tune_for_serving

tune_for_serving(0.2, full_every=3)
tune_for_serving(0.2, full_every=3)  # once per process
assert gc.get_threshold()[0] == YOUNG_THRESHOLD and gc.get_threshold()[2] > 10**9
assert [t.name for t in threading.enumerate()].count("gc-rounds") == 1

class Node:
    pass

watches = []  # outside the cycles: a weak reference collected with its referent never calls

def cycle(freed):
    a, b = Node(), Node()
    a.other, b.other = b, a  # reference counting alone never frees it
    watches.append(weakref.ref(b, lambda _ref: freed.set()))
    return a

garbage = threading.Event()
cycle(garbage)
gc.collect(1)  # promoted to the oldest generation, which nothing collects automatically
print("garbage", "freed" if garbage.wait(10) else "kept")

kept_then_dropped = threading.Event()
alive = cycle(kept_then_dropped)
assert not kept_then_dropped.wait(0.5)  # alive across a round: frozen with the survivors
del alive
print("frozen", "freed" if kept_then_dropped.wait(10) else "kept")
"""


def test_cycles_are_freed_by_the_rounds_frozen_ones_at_the_next_full_round() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["garbage freed", "frozen freed"]


@pytest.mark.parametrize(("command", "tuned"), [("version", False), ("apiserver", True)])
def test_only_serving_commands_set_the_collector(command: str, tuned: bool) -> None:
    code = (
        "import gc, sys; from trainer.cli import main as m; "
        f"sys.argv = ['trainer', {command!r}, '--help']; "
        "m.app = lambda: None; m.main(); print(gc.get_threshold()[0])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout.strip() == "20000") is tuned
