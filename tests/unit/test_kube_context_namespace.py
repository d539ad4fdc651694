"""``context_namespace``: the namespace ``trainer dashboard`` shows by default, found as
kubectl finds it (the current context of the first file that names one; a context's first
definition wins across a ``$KUBECONFIG`` list)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from trainer.kube.kubeconfig import context_namespace


def write(path: Path, current: str | None, contexts: dict[str, str | None]) -> str:
    doc: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Config",
        "contexts": [
            {
                "name": n,
                "context": {"cluster": "c", "user": "u", **({"namespace": ns} if ns else {})},
            }
            for n, ns in contexts.items()
        ],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_current_context_named_context_and_merged_files(tmp_path: Path) -> None:
    first = write(tmp_path / "a", None, {"dev": "team-a", "bare": None})
    second = write(tmp_path / "b", "dev", {"dev": "ignored", "prod": "team-p"})
    paths = os.pathsep.join([first, str(tmp_path / "missing"), second])
    assert context_namespace(paths) == "team-a"  # current from b, definition from a
    assert context_namespace(paths, "prod") == "team-p"
    assert context_namespace(paths, "bare") is None
    assert context_namespace(paths, "nope") is None
    assert context_namespace(first) is None  # no current context
