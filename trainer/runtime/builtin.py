"""The built-in ClusterTrainingRuntimes shipped with the package (``runtimes/`` in the source
tree, ``trainer/data/runtimes`` in an installed package)."""

from __future__ import annotations

from importlib import resources

from trainer.api.load import load_documents, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime


def builtin_runtime_documents() -> list[dict[str, object]]:
    """The wire form of every built-in runtime, sorted by file name."""
    root = resources.files("trainer") / "data" / "runtimes"
    docs: list[dict[str, object]] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith((".yaml", ".yml")):
            docs.extend(d.data for d in load_documents(entry.read_text(), entry.name))
    return docs


def builtin_runtimes() -> dict[str, ClusterTrainingRuntime]:
    """Built-in runtimes by name."""
    out: dict[str, ClusterTrainingRuntime] = {}
    for data in builtin_runtime_documents():
        runtime = parse_object(data)
        if isinstance(runtime, ClusterTrainingRuntime) and runtime.metadata is not None:
            out[runtime.metadata.name or ""] = runtime
    return out
