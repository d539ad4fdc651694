"""Exponential back-off without jitter, for retries counted per key: the delay after the n-th
failure in a row is ``base`` doubled n - 1 times, at most ``cap`` (kube-scheduler's pod
back-off, the kubelet's status retries, the local API server's garbage-collector retries).
The work queue (:mod:`trainer.machinery.workqueue`) and watch restarts
(:class:`trainer.kube.informer.Backoff`, with jitter) keep their own, differently counted."""

from __future__ import annotations

_MAX_DOUBLINGS = 64
"""Past this many doublings any sane base is far beyond any cap, and ``2.0 ** 1024`` would
raise OverflowError: a pod that waits for hours is tried again every ``cap`` seconds, not lost."""


def doubling(failures: int, base: float, cap: float) -> float:
    """The delay after ``failures`` failures in a row (1 or more): ``base``, then doubling, at
    most ``cap``."""
    return float(min(base * 2.0 ** min(max(failures - 1, 0), _MAX_DOUBLINGS), cap))
