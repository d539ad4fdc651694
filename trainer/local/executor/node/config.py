"""``--node-config FILE``: what the local node declares instead of, or beside, what it finds
(docs/local-plane.md, "The node").

The file is one YAML (or JSON) mapping::

    gpus:                     # replaces nvidia-smi discovery; [] declares none
      - product: NVIDIA H100 80GB HBM3
        memoryMiB: 81559
        count: 4              # four GPUs alike (UUIDs GPU-fake-<n>), or
      - uuid: GPU-5c1e...     # one GPU by UUID
        product: NVIDIA H100 80GB HBM3
    capacity:                 # instead of what this host has (a node of a cluster's size:
      cpu: "16"               # the host is then overcommitted, as the file says)
      memory: 64Gi
    reserved:                 # kept from allocatable, as the kubelet's systemReserved
      cpu: "1"
      memory: 2Gi
    labels:                   # added to the node's labels
      topology.kubernetes.io/zone: desk
    taints:
      - {key: dedicated, value: training, effect: NoSchedule}
    scheduling:
      allOrNothing: false     # JobSets are not gangs (PodGroups still are); default true

Declared GPUs let tests and CPU-only machines act as a GPU node. Every problem is one
:class:`NodeConfigError` naming the field (``gpus[1].count: ...``), never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

from trainer.local.executor.node.devices import Gpu
from trainer.machinery.quantity import Quantity, QuantityError
from trainer.machinery.safeload import CONFIG_LIMITS, InputError, load_yaml, read_bytes

FIELDS: Final = ("gpus", "capacity", "reserved", "labels", "taints", "scheduling")
CAPACITY_FIELDS: Final = ("cpu", "memory", "ephemeral-storage", "pods")
SCHEDULING_FIELDS: Final = ("allOrNothing",)
GPU_FIELDS: Final = ("product", "memoryMiB", "count", "uuid")
EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_GPUS: Final = 1024
T = TypeVar("T")


class NodeConfigError(ValueError):
    """A node configuration that cannot be used: ``source: field: what is wrong``."""


@dataclass(frozen=True)
class NodeConfig:
    gpus: tuple[Gpu, ...] | None = None
    """Declared GPUs; None: find them with nvidia-smi."""
    reserved: Mapping[str, Quantity] = field(default_factory=dict)
    capacity: Mapping[str, Quantity] = field(default_factory=dict)
    """Declared capacity (cpu, memory, ephemeral-storage, pods) instead of the host's."""
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    all_or_nothing: bool = True
    """The scheduler admits a JobSet's pods all or none (``scheduling.allOrNothing``)."""


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NodeConfigError(f"{where}: must be a mapping, got {type(value).__name__}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise NodeConfigError(f"{where}: must be a non-empty string")
    return value


def _count(value: Any, where: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_GPUS:
        raise NodeConfigError(f"{where}: must be an integer from {low} to {MAX_GPUS}")
    return value


def _gpus(value: Any) -> tuple[Gpu, ...]:
    if not isinstance(value, list):
        raise NodeConfigError("gpus: must be a list of GPUs ([] for none)")
    gpus: list[Gpu] = []
    for i, item in enumerate(value):
        where = f"gpus[{i}]"
        entry = _mapping(item, where)
        unknown = sorted(set(entry) - set(GPU_FIELDS))
        if unknown:
            raise NodeConfigError(
                f"{where}.{unknown[0]}: unknown field; known: {', '.join(GPU_FIELDS)}"
            )
        product = _string(entry.get("product", "NVIDIA GPU"), f"{where}.product")
        memory = entry.get("memoryMiB", 0)
        if isinstance(memory, bool) or not isinstance(memory, int) or memory < 0:
            raise NodeConfigError(f"{where}.memoryMiB: must be a non-negative integer")
        if "uuid" in entry:
            if "count" in entry:
                raise NodeConfigError(f"{where}: give uuid (one GPU) or count, not both")
            uuids = [_string(entry["uuid"], f"{where}.uuid")]
        else:
            count = _count(entry.get("count", 1), f"{where}.count", 1)
            uuids = [f"GPU-fake-{len(gpus) + n}" for n in range(count)]
        for uuid in uuids:
            if any(g.uuid == uuid for g in gpus):
                raise NodeConfigError(f"{where}.uuid: {uuid!r} is declared twice")
            gpus.append(Gpu(len(gpus), uuid, product, memory))
    if len(gpus) > MAX_GPUS:
        raise NodeConfigError(f"gpus: at most {MAX_GPUS} GPUs, got {len(gpus)}")
    return tuple(gpus)


def _quantities(value: Any, where: str, known: tuple[str, ...] = ()) -> dict[str, Quantity]:
    out = {}
    for name, raw in _mapping(value, where).items():
        if known and name not in known:
            raise NodeConfigError(f"{where}.{name}: unknown resource; known: {', '.join(known)}")
        try:
            out[str(name)] = Quantity.parse(str(raw))
        except QuantityError as exc:
            raise NodeConfigError(f"{where}.{name}: {exc}") from None
        if out[str(name)].value < 0:
            raise NodeConfigError(f"{where}.{name}: must not be negative")
    return out


def _all_or_nothing(value: Any) -> bool:
    doc = _mapping(value, "scheduling")
    unknown = sorted(set(doc) - set(SCHEDULING_FIELDS))
    if unknown:
        raise NodeConfigError(
            f"scheduling.{unknown[0]}: unknown field; known: {', '.join(SCHEDULING_FIELDS)}"
        )
    flag = doc.get("allOrNothing", True)
    if not isinstance(flag, bool):
        raise NodeConfigError("scheduling.allOrNothing: must be true or false")
    return flag


def _taints(value: Any) -> tuple[dict[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise NodeConfigError("taints: must be a list of {key, value, effect}")
    taints = []
    for i, item in enumerate(value):
        entry = _mapping(item, f"taints[{i}]")
        taint = {"key": _string(entry.get("key"), f"taints[{i}].key")}
        if entry.get("value") is not None:
            taint["value"] = _string(entry["value"], f"taints[{i}].value")
        effect = entry.get("effect")
        if effect not in EFFECTS:
            raise NodeConfigError(f"taints[{i}].effect: must be one of {', '.join(EFFECTS)}")
        taint["effect"] = str(effect)
        taints.append(taint)
    return tuple(taints)


def parse_node_config(data: Any) -> NodeConfig:
    """The configuration in ``data`` (a decoded YAML document)."""
    doc = _mapping(data, "the file")
    unknown = sorted(set(doc) - set(FIELDS))
    if unknown:
        raise NodeConfigError(f"{unknown[0]}: unknown field; known: {', '.join(FIELDS)}")
    labels = {
        _string(k, "labels"): _string(v, f"labels.{k}")
        for k, v in _mapping(doc.get("labels"), "labels").items()
    }
    return NodeConfig(
        gpus=_gpus(doc["gpus"]) if "gpus" in doc else None,
        reserved=_quantities(doc.get("reserved"), "reserved"),
        capacity=_quantities(doc.get("capacity"), "capacity", CAPACITY_FIELDS),
        all_or_nothing=_all_or_nothing(doc.get("scheduling")),
        labels=labels,
        taints=_taints(doc.get("taints")),
    )


def load_checked(path: str | Path, parse: Callable[[Any], T], error: type[NodeConfigError]) -> T:
    """Read ``path`` (bounded like every configuration file) and ``parse`` it; every problem is
    one ``error`` naming the file and the field."""
    try:
        data = load_yaml(read_bytes(path, CONFIG_LIMITS), str(path), CONFIG_LIMITS)
    except InputError as exc:
        raise error(str(exc)) from None
    try:
        return parse(data)
    except NodeConfigError as exc:
        raise error(f"{path}: {exc}") from None


def load_node_config(path: str | Path) -> NodeConfig:
    """Read and check ``path``."""
    return load_checked(path, parse_node_config, NodeConfigError)
