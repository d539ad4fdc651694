"""The Runtimes page's rows: ClusterTrainingRuntimes and TrainingRuntimes, as pure functions.

A runtime's row names its framework (the ``trainer.kubeflow.org/framework`` label), its ML
policy (which of torch, mpi, jax, ... it sets, with ``numNodes``), the images of its JobSet
template, and whether it is deprecated: upstream marks that with the label
``trainer.kubeflow.org/support: deprecated``; any annotation whose key mentions deprecation is
shown too (its text says what replaces the runtime).
"""

from __future__ import annotations

from typing import Any

from trainer.api import constants as c
from trainer.dashboard.policy.summary import Obj, meta

POLICY_FIELDS = ("numNodes",)


def _dict(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _images(runtime: Obj) -> list[str]:
    out: list[str] = []
    template = _dict(_dict(_dict(runtime.get("spec")).get("template")).get("spec"))
    for rj in template.get("replicatedJobs") or []:
        pod_spec = _dict(
            _dict(_dict(_dict(_dict(rj).get("template")).get("spec")).get("template")).get("spec")
        )
        for container in (pod_spec.get("initContainers") or []) + (
            pod_spec.get("containers") or []
        ):
            image = _dict(container).get("image")
            if isinstance(image, str) and image not in out:
                out.append(image)
    return out


def policy(runtime: Obj) -> str:
    """``torch (numProcPerNode=auto)``-style text of ``spec.mlPolicy`` without numNodes."""
    ml = _dict(_dict(runtime.get("spec")).get("mlPolicy"))
    parts = []
    for name, value in ml.items():
        if name in POLICY_FIELDS:
            continue
        inner = _dict(value)
        detail = ", ".join(
            f"{k}={str(v).lower() if isinstance(v, bool) else v}"
            for k, v in inner.items()
            if isinstance(v, str | int | float | bool)
        )
        parts.append(f"{name} ({detail})" if detail else name)
    return "; ".join(parts) or "plain"


def deprecation(runtime: Obj) -> str:
    m = meta(runtime)
    labels, notes = _dict(m.get("labels")), _dict(m.get("annotations"))
    texts = [f"{k}: {v}" for k, v in sorted(notes.items()) if "deprecat" in str(k).lower()]
    if labels.get(c.LABEL_SUPPORT) == c.SUPPORT_DEPRECATED:
        texts.insert(0, "deprecated")
    return "; ".join(texts)


def runtime_row(runtime: Obj) -> Obj:
    m = meta(runtime)
    ml = _dict(_dict(runtime.get("spec")).get("mlPolicy"))
    return {
        "kind": str(runtime.get("kind") or ""),
        "namespace": str(m.get("namespace") or ""),
        "name": str(m.get("name") or ""),
        "framework": str(_dict(m.get("labels")).get(c.LABEL_FRAMEWORK) or ""),
        "policy": policy(runtime),
        "numNodes": ml.get("numNodes"),
        "images": _images(runtime),
        "deprecation": deprecation(runtime),
    }
