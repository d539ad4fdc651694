"""What the Helm chart's runtimes installer does, as data (docs/install.md, "Installing with
Helm"): which ClusterTrainingRuntimes to apply, with which label, and which to delete.

Upstream's chart installs its runtimes the same way: a post-install/post-upgrade hook Job
server-side applies the enabled ones, labelled ``trainer.kubeflow.org/managed-by:
runtimes-installer``, and deletes those it labelled that are no longer enabled; a pre-delete
hook Job deletes every runtime with that label. Helm cannot hold the runtimes as objects of the
release: it maps every object to its API before it creates any, and on a cluster without the
CRDs the ClusterTrainingRuntime API is not served yet. The Job runs ``trainer runtimes
install`` and ``trainer runtimes uninstall`` (trainer/cli/runtimes.py), which send what is
decided here.

Pure: documents in, objects and names out.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from trainer.api import constants as c

Obj = dict[str, Any]

MANAGED_BY = c.LABEL_MANAGED_BY_INSTALLER
INSTALLER = "runtimes-installer"
SELECTOR = f"{MANAGED_BY}={INSTALLER}"
"""The label selector of the runtimes the installer owns."""
FIELD_MANAGER = "kubeflow-trainer-runtimes-installer"
KIND = c.KIND_CLUSTER_TRAINING_RUNTIME
API_VERSION = c.API_VERSION


class RuntimesFileError(ValueError):
    """A document of the runtimes file is not a ClusterTrainingRuntime the installer can
    apply; the message names the document and the field."""


def runtimes_to_apply(documents: list[Any], source: str) -> list[Obj]:
    """The ClusterTrainingRuntimes of ``documents`` (empty documents skipped), each a copy
    labelled as the installer's. Raises :class:`RuntimesFileError` for anything else, naming
    the document (1-based) and the field, before anything is sent."""
    out: list[Obj] = []
    seen: dict[str, int] = {}
    for number, doc in enumerate(documents, start=1):
        if doc is None:
            continue
        where = f"{source}: document {number}"
        if not isinstance(doc, dict):
            raise RuntimesFileError(f"{where}: expected a mapping, found {type(doc).__name__}")
        if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
            raise RuntimesFileError(
                f"{where}: apiVersion/kind: {doc.get('apiVersion')!r}/{doc.get('kind')!r}; "
                f"accepted: {API_VERSION}/{KIND}"
            )
        meta = doc.get("metadata")
        if not isinstance(meta, dict):
            raise RuntimesFileError(f"{where}: metadata: required")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise RuntimesFileError(f"{where}: metadata.name: required")
        if name in seen:
            raise RuntimesFileError(
                f"{where}: metadata.name: {name!r} is also document {seen[name]}"
            )
        seen[name] = number
        if "namespace" in meta:
            raise RuntimesFileError(
                f"{where}: metadata.namespace: a ClusterTrainingRuntime has none"
            )
        obj = copy.deepcopy(doc)
        labels = obj["metadata"].get("labels")
        obj["metadata"]["labels"] = {
            **(labels if isinstance(labels, dict) else {}),
            MANAGED_BY: INSTALLER,
        }
        out.append(obj)
    return out


@dataclass(frozen=True)
class Plan:
    apply: list[Obj]
    """The runtimes to server-side apply, in the file's order."""
    prune: list[str]
    """Names of runtimes the installer labelled earlier that the file no longer holds."""


def plan(wanted: list[Obj], owned: list[Obj], prune: bool) -> Plan:
    """``owned``: the live runtimes carrying the installer's label. With ``prune``, those
    the file does not name are deleted (a runtime switched off in the values); a runtime of
    the same name the installer did not label is never deleted, only taken over by apply."""
    names = {o["metadata"]["name"] for o in wanted}
    stale = sorted(
        o["metadata"]["name"]
        for o in owned
        if (o["metadata"].get("labels") or {}).get(MANAGED_BY) == INSTALLER
        and o["metadata"]["name"] not in names
    )
    return Plan(apply=wanted, prune=stale if prune else [])
