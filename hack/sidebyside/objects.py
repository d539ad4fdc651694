"""What each controller wrote, made comparable, and the differences between two such records
(docs/side-by-side.md). Pure: no I/O.

Two runs of the same corpus differ in what no controller decides: the namespace (each
controller's run has its own), object UIDs, resource versions, timestamps, the random SSH keys
of MPI Secrets and the random times of KWOK pods. :func:`normalise` removes or replaces
exactly those; everything else a controller wrote is compared.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from trainer.controller.applydiff import QUANTITY_MAPS
from trainer.machinery.quantity import Quantity, QuantityError

DROPPED_METADATA = (
    "uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink",
)  # fmt: skip
TIME_KEYS = ("lastTransitionTime", "lastUpdateTime", "lastProbeTime", "time")
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _strings(value: Any, namespace: str) -> Any:
    if isinstance(value, str):
        return UID.sub("$UID", value.replace(namespace, "$NS")) if namespace else value
    if isinstance(value, list):
        return [_strings(v, namespace) for v in value]
    if isinstance(value, dict):
        return {_strings(k, namespace): _strings(v, namespace) for k, v in value.items()}
    return value


def _drop_times(value: Any) -> Any:
    if isinstance(value, list):
        return [_drop_times(v) for v in value]
    if isinstance(value, dict):
        return {k: _drop_times(v) for k, v in value.items() if k not in TIME_KEYS}
    return value


def _quantities(value: Any, inside: bool = False) -> Any:
    """Resource quantities in Go's canonical form: a Go webhook that decodes and re-encodes
    an object (upstream's TrainJob defaulter, JobSet's) stores ``2`` as ``"2"`` and ``1000m``
    as ``"1"``; the same quantity either way."""
    if isinstance(value, dict):
        if inside:  # a map of resource names to quantities
            return {k: _quantities(v, True) for k, v in value.items()}
        return {k: _quantities(v, k in QUANTITY_MAPS) for k, v in value.items()}
    if isinstance(value, list):
        return [_quantities(v) for v in value]
    if inside and isinstance(value, str | int | float) and not isinstance(value, bool):
        try:
            return str(Quantity.parse(value))
        except QuantityError:
            return value
    return value


def _without_empty(value: Any) -> Any:
    """Empty mappings dropped: Go writes a struct field without ``omitempty`` as ``{}``
    (``metadata: {}``, ``resources: {}``, ``status: {}`` in upstream's runtime snapshot)."""
    if isinstance(value, dict):
        kept = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v != {}}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def normalise(obj: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """The object as a controller decided it: server bookkeeping dropped, the run's namespace
    and UIDs replaced by ``$NS`` and ``$UID``, timestamps dropped, Secret values replaced by
    their presence (MPI keys are random), JobSet status (JobSet's controller writes it)
    dropped."""
    out = dict(obj)
    meta = {k: v for k, v in dict(out.get("metadata") or {}).items() if k not in DROPPED_METADATA}
    if meta.get("ownerReferences"):
        meta["ownerReferences"] = [
            {k: v for k, v in ref.items() if k != "uid"} for ref in meta["ownerReferences"]
        ]
    annotations = dict(meta.get("annotations") or {})
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    out["metadata"] = meta
    kind = out.get("kind")
    if kind == "ConfigMap" and isinstance((out.get("data") or {}).get("runtime"), str):
        # A runtime snapshot: the runtime as YAML. Compared as the object it holds, the
        # server's bookkeeping dropped as for any object (upstream's copy keeps its informer
        # cache's managedFields; the serialisations' key order and quoting differ).
        try:
            held = yaml.safe_load(out["data"]["runtime"])
        except yaml.YAMLError:
            held = None
        if isinstance(held, dict):
            held = normalise(_without_empty(held), namespace)
            out["data"] = {**out["data"], "runtime": held}
    if kind == "Secret":
        out["data"] = dict.fromkeys(out.get("data") or {}, "<set>")
    if kind == "JobSet":
        out.pop("status", None)
    normalised: dict[str, Any] = _quantities(_strings(_drop_times(out), namespace))
    return normalised


JOB_COUNTS = ("ready", "succeeded", "failed", "active", "suspended")
MIRRORS_ITS_JOBSET = "<its JobSet's replicatedJobsStatus>"


def _counts(entries: Any) -> list[dict[str, Any]] | None:
    if not isinstance(entries, list):
        return None
    return [
        {"name": e.get("name"), **{k: e.get(k) or 0 for k in JOB_COUNTS}}
        for e in entries
        if isinstance(e, dict)
    ]


def jobs_status_as_mirror(
    trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The TrainJob with ``status.jobsStatus`` replaced by :data:`MIRRORS_ITS_JOBSET` when it
    holds its own JobSet's ``replicatedJobsStatus`` counts (zeros as absent, as either writer
    may leave them out). The counts are the JobSet controller's, read off KWOK pods whose
    timing differs between the two runs (an MPI TrainJob's node Job may or may not have
    succeeded when its launcher ends the JobSet), so each side is held to its own JobSet, the
    way JobSet status itself is dropped (:func:`normalise`); a TrainJob whose counts are not
    its JobSet's keeps them and shows as a difference."""
    out = dict(trainjob)
    status = dict(out.get("status") or {})
    if jobset is None or "jobsStatus" not in status:
        return out
    mirror = _counts((jobset.get("status") or {}).get("replicatedJobsStatus"))
    if mirror is not None and _counts(status["jobsStatus"]) == mirror:
        status["jobsStatus"] = MIRRORS_ITS_JOBSET
        out["status"] = status
    return out


def key(obj: Mapping[str, Any]) -> str:
    """``Kind/name`` (the namespace is the run's own)."""
    group = str(obj.get("apiVersion", "")).rpartition("/")[0]
    kind = f"{obj.get('kind')}.{group}" if group and obj.get("kind") == "PodGroup" else obj["kind"]
    return f"{kind}/{obj['metadata']['name']}"


@dataclass(frozen=True)
class Difference:
    """One field that differs: ``path`` names it (``spec.a[0].b``), ``change`` says how
    (``upstream-only``, ``ours-only``: the field is written by one controller alone;
    ``value``: both write it, differently)."""

    object: str
    path: str
    change: str
    upstream: Any
    ours: Any

    @property
    def pattern_path(self) -> str:
        """The path with list indices made ``[*]``: what the list of differences matches."""
        return re.sub(r"\[\d+\]", "[*]", self.path)


MISSING = object()


def _walk(path: str, a: Any, b: Any) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{k}" if path else str(k)
            yield from _walk(sub, a.get(k, MISSING), b.get(k, MISSING))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _walk(f"{path}[{i}]", x, y)
    elif a != b:
        yield path, a, b


def diff(upstream: Mapping[str, Any], ours: Mapping[str, Any]) -> list[Difference]:
    """Every difference between two records of ``key -> normalised object``."""
    found: list[Difference] = []
    for name in sorted(set(upstream) | set(ours)):
        if name not in ours:
            found.append(Difference(name, "", "upstream-only", upstream[name], None))
            continue
        if name not in upstream:
            found.append(Difference(name, "", "ours-only", None, ours[name]))
            continue
        for path, a, b in _walk("", upstream[name], ours[name]):
            change = "ours-only" if a is MISSING else "upstream-only" if b is MISSING else "value"
            found.append(
                Difference(
                    name, path, change, None if a is MISSING else a, None if b is MISSING else b
                )
            )
    return found


@dataclass(frozen=True)
class Allowed:
    """One entry of the list of justified differences (hack/sidebyside/differences.yaml)."""

    id: str
    kind: str
    path: str
    change: str
    reason: str
    justification: str
    test: str
    upstream_value: str = ""
    """A regular expression the upstream side's value must contain (empty: any)."""
    ours_value: str = ""
    """A regular expression our side's value must contain (empty: any)."""
    object: str = ""
    """A pattern the object's name must match (empty: any)."""

    def matches(self, d: Difference) -> bool:
        kind, _, name = d.object.partition("/")
        return (
            glob(self.kind, kind)
            and (not self.object or glob(self.object, name))
            and (self.change in ("any", d.change))
            and glob(self.path, d.pattern_path)
            and _value_matches(self.upstream_value, d.upstream)
            and _value_matches(self.ours_value, d.ours)
        )


def _value_matches(pattern: str, value: Any) -> bool:
    if not pattern:
        return True
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return re.search(pattern, text) is not None


def glob(pattern: str, text: str) -> bool:
    """``*`` matches any run of characters; everything else itself (``[*]`` too, unlike
    fnmatch, where it is a character class)."""
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, text) is not None


def allowed_from(entries: list[dict[str, Any]]) -> list[Allowed]:
    fields = ("id", "kind", "path", "change", "reason", "justification", "test")
    optional = ("upstream_value", "ours_value", "object")
    out = []
    for i, e in enumerate(entries):
        missing = [f for f in fields if not isinstance(e.get(f), str) or not e[f]]
        if missing:
            raise ValueError(f"differences[{i}]: missing or empty {', '.join(missing)}")
        unknown = sorted(set(e) - set(fields) - set(optional))
        if unknown:
            raise ValueError(f"differences[{i}]: unknown {', '.join(unknown)}")
        out.append(Allowed(**{f: e[f] for f in (*fields, *optional) if f in e}))
    return out


def follow_verdicts(
    covered: dict[str, list[Difference]], unexplained: list[Difference]
) -> list[Difference]:
    """Differences on the objects of a TrainJob one side admitted and the other refused
    (its ``Verdict/TrainJob/<name>`` difference), moved under the entry that covers that
    verdict; those left unexplained are returned. A TrainJob's objects are named after it."""
    entry_of: dict[str, str] = {}
    for entry, found in covered.items():
        for d in found:
            if d.object.startswith("Verdict/TrainJob/"):
                entry_of[d.object.removeprefix("Verdict/TrainJob/")] = entry
    left = []
    for d in unexplained:
        name = d.object.split("/", 1)[1]
        owner = next((j for j in entry_of if name == j or name.startswith(j + "-")), None)
        if owner is None:
            left.append(d)
        else:
            covered[entry_of[owner]].append(d)
    return left


def classify(
    found: list[Difference], allowed: list[Allowed]
) -> tuple[dict[str, list[Difference]], list[Difference]]:
    """The differences each entry of ``allowed`` covers, and those no entry covers."""
    covered: dict[str, list[Difference]] = {a.id: [] for a in allowed}
    unexplained: list[Difference] = []
    for d in found:
        entry = next((a for a in allowed if a.matches(d)), None)
        if entry is None:
            unexplained.append(d)
        else:
            covered[entry.id].append(d)
    return covered, unexplained


def short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
