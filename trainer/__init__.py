"""A Python reimplementation of the Kubeflow Trainer v2.3 controller, built on JobSet."""

from __future__ import annotations

__version__ = "0.1.0"
