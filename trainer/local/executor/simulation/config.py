"""``--simulate FILE``: simulated nodes and the stages their pods go through
(docs/simulation.md), checked before anything starts.

The file is one YAML (or JSON) mapping::

    withHostNode: false         # default true: the simulated nodes join this host's node
    nodes:                      # templates, each making ``count`` nodes
      - count: 4
        namePrefix: sim-gpu     # nodes sim-gpu-0 ... sim-gpu-3
        zones: [a, b]           # round robin: topology.kubernetes.io/zone
        capacity: {cpu: "64", memory: 512Gi}
        gpus: {count: 8, product: NVIDIA H100 80GB HBM3, memoryMiB: 81559}
        labels: {pool: training}
        taints: [{key: dedicated, value: training, effect: NoSchedule}]
    stages:                     # what a pod on a simulated node does (KWOK's stages, reduced)
      duration: 30s             # running time; a pod's sim-duration label or annotation wins
      jitter: 0.2               # the duration varies by up to +-20 %
      failureProbability: 0     # chance that a run fails ...
      exitCode: 1               # ... with this exit code

Every problem is one :class:`SimulationError` naming the field (``nodes[1].count: ...``).
Pure: no client, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from trainer.local.executor.node.config import (
    CAPACITY_FIELDS,
    NodeConfig,
    NodeConfigError,
    _quantities,
    _taints,
    load_checked,
)
from trainer.local.executor.node.devices import Gpu
from trainer.machinery.names import is_qualified_name, is_valid_label_value
from trainer.machinery.quantity import Quantity

FIELDS: Final = ("withHostNode", "nodes", "stages")
NODE_FIELDS: Final = ("count", "namePrefix", "zones", "capacity", "gpus", "labels", "taints")
GPU_FIELDS: Final = ("count", "product", "memoryMiB")
STAGE_FIELDS: Final = ("duration", "jitter", "failureProbability", "exitCode")
MAX_NODES: Final = 10_000
"""All templates together (the issue's largest rehearsal is 1,000 nodes)."""
MAX_GPUS_PER_NODE: Final = 64
MAX_DURATION: Final = 7 * 24 * 3600.0
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
SIMULATED_LABEL: Final = "trainer.kubeflow.org/simulated"
"""Set to ``"true"`` on every simulated node (KWOK marks its nodes ``type: kwok``)."""
DEFAULT_CAPACITY: Final = {"cpu": "32", "memory": "256Gi", "ephemeral-storage": "1Ti"}
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class SimulationError(NodeConfigError):
    """A simulation file that cannot be used: ``source: field: what is wrong``."""


@dataclass(frozen=True)
class Stages:
    """How long a pod on a simulated node runs and how it ends (docs/simulation.md)."""

    duration: float = 30.0
    jitter: float = 0.2
    failure_probability: float = 0.0
    exit_code: int = 1


@dataclass(frozen=True)
class NodeTemplate:
    count: int
    name_prefix: str
    zones: tuple[str, ...] = ()
    capacity: Mapping[str, Quantity] = field(default_factory=dict)
    gpus: tuple[Gpu, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True)
class SimNode:
    """One simulated node: its name, GPUs and what :func:`~trainer.local.executor.node.heartbeat.
    node_object` needs to describe it."""

    name: str
    gpus: tuple[Gpu, ...]
    config: NodeConfig


@dataclass(frozen=True)
class Simulation:
    nodes: tuple[NodeTemplate, ...] = ()
    with_host_node: bool = True
    stages: Stages = Stages()

    def sim_nodes(self) -> Iterator[SimNode]:
        """Every simulated node, templates in order, ``<namePrefix>-<i>``."""
        for template in self.nodes:
            defaults = {k: Quantity.parse(v) for k, v in DEFAULT_CAPACITY.items()}
            for i in range(template.count):
                labels = {SIMULATED_LABEL: "true", **template.labels}
                if template.zones:
                    labels[ZONE_LABEL] = template.zones[i % len(template.zones)]
                config = NodeConfig(
                    gpus=template.gpus,
                    capacity={**defaults, **template.capacity},
                    labels=labels,
                    taints=template.taints,
                )
                yield SimNode(f"{template.name_prefix}-{i}", template.gpus, config)


def _mapping(value: Any, where: str, known: tuple[str, ...]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SimulationError(f"{where}: must be a mapping, got {type(value).__name__}")
    unknown = sorted(str(k) for k in set(value) - set(known))
    if unknown:
        prefix = f"{where}." if where != "the file" else ""
        raise SimulationError(f"{prefix}{unknown[0]}: unknown field; known: {', '.join(known)}")
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise SimulationError(f"{where}: must be a non-empty string")
    return value


def _label(key: Any, value: Any, where: str) -> tuple[str, str]:
    """A label the API server accepts on a Node (else the node could never register)."""
    key = _string(key, where)
    value = value if isinstance(value, str) else None
    if value is None:
        raise SimulationError(f"{where}.{key}: must be a string")
    problems = is_qualified_name(key) + is_valid_label_value(value)
    if problems:
        raise SimulationError(f"{where}.{key}: {problems[0]}")
    return key, value


def _int(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SimulationError(f"{where}: must be an integer from {low} to {high}")
    return value


def _fraction(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise SimulationError(f"{where}: must be a number from 0 to 1")
    return float(value)


def parse_duration(value: Any, where: str) -> float:
    """``30s``, ``1.5m``, ``500ms``, ``2h`` or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value).strip()) if isinstance(value, str) else None
        if match is None:
            raise SimulationError(f"{where}: must be a duration such as 30s, 500ms, 2m or 1h")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not 0 <= seconds <= MAX_DURATION:
        raise SimulationError(f"{where}: must be from 0 to {MAX_DURATION:g} seconds")
    return seconds


def _gpus(value: Any, where: str, node_prefix: str) -> tuple[Gpu, ...]:
    entry = _mapping(value, where, GPU_FIELDS)
    count = _int(entry.get("count", 0), f"{where}.count", 0, MAX_GPUS_PER_NODE)
    product = _string(entry.get("product", "NVIDIA GPU"), f"{where}.product")
    memory = _int(entry.get("memoryMiB", 0), f"{where}.memoryMiB", 0, 1 << 24)
    return tuple(Gpu(i, f"GPU-sim-{node_prefix}-{i}", product, memory) for i in range(count))


def _template(value: Any, where: str) -> NodeTemplate:
    entry = _mapping(value, where, NODE_FIELDS)
    count = _int(entry.get("count", 1), f"{where}.count", 0, MAX_NODES)
    prefix = _string(entry.get("namePrefix"), f"{where}.namePrefix")
    if len(prefix) > 200 or not _NAME.match(prefix):
        raise SimulationError(
            f"{where}.namePrefix: must be a DNS label prefix (lower case letters, digits, '-')"
        )
    zones = entry.get("zones") or []
    if not isinstance(zones, list):
        raise SimulationError(f"{where}.zones: must be a list of zone names")
    try:
        capacity = _quantities(entry.get("capacity"), f"{where}.capacity", CAPACITY_FIELDS)
        taints = _taints(entry.get("taints"))
    except NodeConfigError as exc:
        message = str(exc)
        if message.startswith("taints"):
            message = f"{where}.{message}"
        raise SimulationError(message) from None
    labels = entry.get("labels") or {}
    if not isinstance(labels, dict):
        raise SimulationError(f"{where}.labels: must be a mapping")
    for i, zone in enumerate(zones):
        problems = is_valid_label_value(_string(zone, f"{where}.zones[{i}]"))
        if problems:
            raise SimulationError(f"{where}.zones[{i}]: {problems[0]}")
    return NodeTemplate(
        count=count,
        name_prefix=prefix,
        zones=tuple(zones),
        capacity=capacity,
        gpus=_gpus(entry.get("gpus"), f"{where}.gpus", prefix),
        labels=dict(_label(k, v, f"{where}.labels") for k, v in labels.items()),
        taints=taints,
    )


def _stages(value: Any) -> Stages:
    entry = _mapping(value, "stages", STAGE_FIELDS)
    default = Stages()
    return Stages(
        duration=parse_duration(entry.get("duration", default.duration), "stages.duration"),
        jitter=_fraction(entry.get("jitter", default.jitter), "stages.jitter"),
        failure_probability=_fraction(
            entry.get("failureProbability", default.failure_probability),
            "stages.failureProbability",
        ),
        exit_code=_int(entry.get("exitCode", default.exit_code), "stages.exitCode", 1, 255),
    )


def parse_simulation(data: Any) -> Simulation:
    """The simulation in ``data`` (a decoded YAML document)."""
    doc = _mapping(data, "the file", FIELDS)
    nodes = doc.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise SimulationError("nodes: must be a non-empty list of node templates")
    templates = tuple(_template(t, f"nodes[{i}]") for i, t in enumerate(nodes))
    prefixes = [t.name_prefix for t in templates]
    for i, prefix in enumerate(prefixes):
        if prefix in prefixes[:i]:
            raise SimulationError(f"nodes[{i}].namePrefix: {prefix!r} is used twice")
    total = sum(t.count for t in templates)
    if total > MAX_NODES:
        raise SimulationError(f"nodes: at most {MAX_NODES} nodes in all, got {total}")
    host = doc.get("withHostNode", True)
    if not isinstance(host, bool):
        raise SimulationError("withHostNode: must be true or false")
    return Simulation(nodes=templates, with_host_node=host, stages=_stages(doc.get("stages")))


def load_simulation(path: str | Path) -> Simulation:
    """Read and check ``path``."""
    return load_checked(path, parse_simulation, SimulationError)
