"""Our generated CRDs against upstream's released ones, node by node.

Platform teams install our CRDs in place of Kubeflow Trainer v2.3.0's (and, on the local plane,
our JobSet CRD stands in for JobSet v0.12.0's), so what the API server accepts, defaults, prunes
and merges must be the same. This test walks both schemas side by side and compares every
aspect that changes behaviour: type, format, enum, default, minimum/maximum, lengths, item and
property counts, pattern, required, list type and map keys, map type, CEL rules and messages,
preserve-unknown-fields, int-or-string, embedded resources, and, for the whole CRD, group,
scope, names, versions, subresources and printer columns. Descriptions are not compared.

Every difference fails the test unless it is on ``ALLOWED`` (our intended extensions, each
with its reason) or under a ``PENDING_POD_SCHEMA`` prefix; an allow-list entry or prefix that
no longer hides any difference fails too, so both lists stay exactly as long as they must.

The upstream files are read from ``../shared/upstream-crds/`` beside the repository (never
copied into it: we generate our CRDs from our models); without that folder the test is skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.api import crds

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT.parent / "shared" / "upstream-crds"

Node = dict[str, Any]

# Kinds compared, their upstream file, and the name their allow-list entries use ("runtimes"
# for the two runtime kinds, which share one schema).
FILES = {
    "TrainJob": ("trainer.kubeflow.org_trainjobs.yaml", "TrainJob"),
    "TrainingRuntime": ("trainer.kubeflow.org_trainingruntimes.yaml", "runtimes"),
    "ClusterTrainingRuntime": ("trainer.kubeflow.org_clustertrainingruntimes.yaml", "runtimes"),
    "JobSet": ("jobset.x-k8s.io_jobsets.yaml", "JobSet"),
}

# Subtrees whose differences are not reported. Empty: the Kubernetes core types our CRDs embed
# (pod and Job templates, env vars, references, resources, claim templates) are generated from
# the Kubernetes API schema (trainer/machinery/kubeschema.py, docs/crds.md) and compared like
# the rest.
# Keyed by (allow-list group, path prefix); a prefix that hides nothing fails the test.
PENDING_POD_SCHEMA: frozenset[tuple[str, str]] = frozenset()

# Our intended extensions: (group, path, aspect) -> why. A path is the property path from the
# schema root ("[]" for list items, "{}" for map values); "" is the CRD itself.
ALLOWED: dict[tuple[str, str, str], str] = {
    # --- TrainJob ---
    ("TrainJob", "status.state", "property"): (
        "additive status.state (Pending/Running/Suspended/Complete/Failed), shown as STATE"
    ),
    ("TrainJob", "spec.ttlSecondsAfterFinished", "property"): (
        "additive TTL after finish as upstream plans it (kubeflow/trainer#4052): int32, min 0, "
        "mutable; the TrainJob is deleted that long after Complete/Failed (docs/lifecycle.md)"
    ),
    ("TrainJob", "status.startTime", "property"): (
        "additive start time as upstream plans it (kubeflow/trainer#4052): created unsuspended "
        "or last resumed, as a Job's; the active deadline counts from it"
    ),
    ("TrainJob", "status.completionTime", "property"): (
        "additive completion time as upstream plans it (kubeflow/trainer#4052): when it turned "
        "Complete or Failed; the TTL counts from it"
    ),
    ("TrainJob", "", "additionalPrinterColumns"): (
        "STATE, RUNTIME, NODES and AGE columns for `kubectl get trainjobs`"
    ),
    ("TrainJob", "spec.trainer.numNodes", "minimum"): (
        "upstream added minimum 0 after v2.3.0: a negative node count is always a mistake"
    ),
    ("TrainJob", "spec.trainer.numProcPerNode", "x-kubernetes-validations"): (
        "upstream added `self >= 1` after v2.3.0: zero or negative processes cannot train"
    ),
    # --- TrainingRuntime and ClusterTrainingRuntime ---
    ("runtimes", "", "additionalPrinterColumns"): "an AGE column for `kubectl get`",
    ("runtimes", "spec.runPolicy", "property"): (
        "additive runPolicy as upstream plans it (kubeflow/trainer#4052): activeDeadlineSeconds "
        "and ttlSecondsAfterFinished defaults that a TrainJob's own fields override"
    ),
    ("runtimes", "spec.mlPolicy.tensorflow", "property"): "additive TensorFlow (TF_CONFIG) policy",
    ("runtimes", "spec.mlPolicy.paddle", "property"): "additive PaddlePaddle policy",
    ("runtimes", "spec.mlPolicy.torch.elasticPolicy", "property"): (
        "additive elastic torchrun policy (v2.1's shape, implemented)"
    ),
    ("runtimes", "spec.mlPolicy", "x-kubernetes-validations"): (
        "the one-policy rule also counts the additive tensorflow and paddle policies (otherwise "
        "the same rule and message: test_the_one_policy_rule_is_upstreams_plus_our_policies)"
    ),
    ("runtimes", "spec.mlPolicy.mpi.mpiImplementation", "enum"): (
        "additive MPICH value: hostfile lines host:slots and Hydra's launcher env "
        "(upstream's CRD admits only OpenMPI, kubeflow/trainer#3712); every v2.3.0 value stays"
    ),
    ("runtimes", "spec.mlPolicy.mpi.numProcPerNode", "x-kubernetes-validations"): (
        "upstream added `self >= 1` after v2.3.0: an MPI hostfile needs at least one slot"
    ),
    # --- JobSet: none, our JobSet CRD matches v0.12.0's outside the pending subtrees ---
}

# The schema keywords compared as plain values.
SCALAR_ASPECTS = (
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "pattern",
    "nullable",
    "anyOf",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource",
)
ABSENT: str = "<absent>"


@dataclass(frozen=True)
class Difference:
    group: str
    kind: str
    path: str
    aspect: str
    ours: Any
    upstream: Any

    def __str__(self) -> str:
        where = self.path or "<the CRD>"
        return (
            f"{self.kind} {where} [{self.aspect}]\n"
            f"    ours:     {_show(self.ours)}\n"
            f"    upstream: {_show(self.upstream)}"
        )


def _show(value: Any) -> str:
    if value is ABSENT:
        return "<absent>"
    text: str = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix(" ...")


def _rules(node: Node) -> list[str]:
    return sorted(
        yaml.safe_dump(r, sort_keys=True) for r in node.get("x-kubernetes-validations", [])
    )


def schema_differences(
    ours: Node, upstream: Node, path: str = ""
) -> Iterator[tuple[str, str, Any, Any]]:
    """(path, aspect, ours, upstream) for every difference between two schema nodes."""
    for aspect in SCALAR_ASPECTS:
        a, b = ours.get(aspect, ABSENT), upstream.get(aspect, ABSENT)
        if a != b:
            yield path, aspect, a, b
    if sorted(ours.get("required", [])) != sorted(upstream.get("required", [])):
        yield (
            path,
            "required",
            sorted(ours.get("required", [])),
            sorted(upstream.get("required", [])),
        )
    if _rules(ours) != _rules(upstream):
        yield (
            path,
            "x-kubernetes-validations",
            ours.get("x-kubernetes-validations", ABSENT),
            upstream.get("x-kubernetes-validations", ABSENT),
        )
    mine, theirs = ours.get("properties", {}), upstream.get("properties", {})
    for name in sorted(set(mine) | set(theirs)):
        child = f"{path}.{name}" if path else name
        if name not in theirs:
            yield child, "property", "present", ABSENT
        elif name not in mine:
            yield child, "property", ABSENT, "present"
        else:
            yield from schema_differences(mine[name], theirs[name], child)
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        a, b = ours.get(key, ABSENT), upstream.get(key, ABSENT)
        if isinstance(a, dict) and isinstance(b, dict):
            yield from schema_differences(a, b, path + suffix)
        elif a != b:
            yield (
                path,
                key,
                "a schema" if isinstance(a, dict) else a,
                ("a schema" if isinstance(b, dict) else b),
            )


def crd_differences(ours: Node, upstream: Node) -> Iterator[tuple[str, str, Any, Any]]:
    """Differences of the CRD outside its schema."""
    for key in ("group", "scope", "names"):
        if ours["spec"].get(key) != upstream["spec"].get(key):
            yield "", key, ours["spec"].get(key, ABSENT), upstream["spec"].get(key, ABSENT)
    if ours["metadata"]["name"] != upstream["metadata"]["name"]:
        yield "", "metadata.name", ours["metadata"]["name"], upstream["metadata"]["name"]
    mine, theirs = ours["spec"]["versions"], upstream["spec"]["versions"]
    if [v["name"] for v in mine] != [v["name"] for v in theirs]:
        yield "", "versions", [v["name"] for v in mine], [v["name"] for v in theirs]
        return
    for a, b in zip(mine, theirs, strict=True):
        for key in ("served", "storage", "subresources", "additionalPrinterColumns", "deprecated"):
            if a.get(key) != b.get(key):
                yield "", key, a.get(key, ABSENT), b.get(key, ABSENT)


# libyaml when PyYAML has it: the upstream files are 3 MB of YAML.
Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def differences(kind: str, ours: Node) -> list[Difference]:
    filename, group = FILES[kind]
    upstream = yaml.load((UPSTREAM / filename).read_text(), Loader=Loader)
    found = list(crd_differences(ours, upstream))
    found += schema_differences(
        crds.crd_schema(ours), upstream["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    )
    return [Difference(group, kind, *d) for d in found]


def pending(d: Difference) -> tuple[str, str] | None:
    for group, prefix in PENDING_POD_SCHEMA:
        under = d.path == prefix or d.path.startswith((prefix + ".", prefix + "["))
        if d.group == group and under:
            return group, prefix
    return None


@pytest.fixture(scope="module")
def all_differences() -> dict[str, list[Difference]]:
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream CRDs not found at {UPSTREAM} (CI checks them out as ../shared)")
    ours = {c["spec"]["names"]["kind"]: c for c in [*crds.trainer_crds(), crds.jobset_crd()]}
    return {kind: differences(kind, ours[kind]) for kind in FILES}


@pytest.mark.parametrize("kind", list(FILES))
def test_our_crd_matches_upstream_except_the_allowed_extensions(
    kind: str, all_differences: dict[str, list[Difference]]
) -> None:
    unexpected = [
        d
        for d in all_differences[kind]
        if pending(d) is None and (d.group, d.path, d.aspect) not in ALLOWED
    ]
    if unexpected:
        pytest.fail(
            f"{len(unexpected)} difference(s) from upstream's {FILES[kind][0]} that are not on "
            "ALLOWED (fix the models in trainer/api, or allow-list an intended extension with "
            "its reason):\n" + "\n".join(str(d) for d in unexpected),
            pytrace=False,
        )


def test_every_allowed_entry_and_pending_prefix_still_hides_a_difference(
    all_differences: dict[str, list[Difference]],
) -> None:
    found = [d for ds in all_differences.values() for d in ds]
    used = {(d.group, d.path, d.aspect) for d in found if pending(d) is None}
    stale = [f"ALLOWED {key}" for key in ALLOWED if key not in used]
    used_prefixes = {pending(d) for d in found}
    stale += [f"PENDING_POD_SCHEMA {p}" for p in sorted(PENDING_POD_SCHEMA - used_prefixes)]
    if stale:
        pytest.fail(
            "entries that no longer match any difference: remove them\n" + "\n".join(stale),
            pytrace=False,
        )


def test_the_comparison_sees_each_aspect() -> None:
    """The walk itself: a change of each kind is reported with its path and both values."""
    upstream: Node = {
        "type": "object",
        "required": ["a"],
        "properties": {
            "a": {"type": "string", "maxLength": 253},
            "m": {"type": "object", "additionalProperties": {"type": "string"}},
            "l": {
                "type": "array",
                "items": {"type": "object", "x-kubernetes-map-type": "atomic"},
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
            "gone": {"type": "string"},
        },
        "x-kubernetes-validations": [{"rule": "self.a != ''", "message": "a"}],
    }
    ours: Node = {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 63},
            "m": {"type": "object", "additionalProperties": {"type": "integer"}},
            "l": {"type": "array", "items": {"type": "object"}, "x-kubernetes-list-type": "atomic"},
            "extra": {"type": "string"},
        },
        "x-kubernetes-validations": [{"rule": "self.a != ''", "message": "b"}],
    }
    found = {(p, a): (o, u) for p, a, o, u in schema_differences(ours, upstream)}
    assert found == {
        ("", "required"): ([], ["a"]),
        ("", "x-kubernetes-validations"): (
            [{"rule": "self.a != ''", "message": "b"}],
            [{"rule": "self.a != ''", "message": "a"}],
        ),
        ("a", "maxLength"): (63, 253),
        ("m{}", "type"): ("integer", "string"),
        ("l", "x-kubernetes-list-type"): ("atomic", "map"),
        ("l", "x-kubernetes-list-map-keys"): (ABSENT, ["name"]),
        ("l[]", "x-kubernetes-map-type"): (ABSENT, "atomic"),
        ("extra", "property"): ("present", ABSENT),
        ("gone", "property"): (ABSENT, "present"),
    }
    message = str(Difference("TrainJob", "TrainJob", "a", "maxLength", 63, 253))
    assert message == "TrainJob a [maxLength]\n    ours:     63\n    upstream: 253"


def test_the_one_policy_rule_is_upstreams_plus_our_policies() -> None:
    """The one allowed CEL difference: the same rule and message as upstream's, with the two
    additive policies counted too."""
    if not UPSTREAM.is_dir():
        pytest.skip(f"upstream CRDs not found at {UPSTREAM} (CI checks them out as ../shared)")
    upstream = yaml.load((UPSTREAM / FILES["TrainingRuntime"][0]).read_text(), Loader=Loader)
    schema = upstream["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    [theirs] = schema["properties"]["spec"]["properties"]["mlPolicy"]["x-kubernetes-validations"]
    [ours] = crds.schema_for_kind("TrainingRuntime")["properties"]["spec"]["properties"][
        "mlPolicy"
    ]["x-kubernetes-validations"]
    assert ours["message"] == theirs["message"]
    extra = ", has(self.tensorflow), has(self.paddle)"
    assert extra in ours["rule"]
    assert "".join(ours["rule"].replace(extra, "").split()) == "".join(theirs["rule"].split())
