"""What a pod's containers may read about it, and the basic types of the pod's local plan.

The downward API (``fieldRef`` and ``resourceFieldRef`` values, the pod's hostname), ``$(VAR)``
expansion, the ConfigMaps, Secrets and service-account tokens a pod references and their data,
and the types the rest of the plan is built from: :class:`Node` (this host's capacity),
:class:`Sources` (the objects read from the API) and :class:`ConfigError` (what keeps a
container waiting). Pure: data in, data out.

The kubelet's container plan (:mod:`~trainer.local.executor.kubelet.policy.podenv`), rewrites
(:mod:`~trainer.local.executor.kubelet.policy.rewrites`) and volumes
(:mod:`~trainer.local.executor.kubelet.policy.volumes`) are built on this module; it imports none
of them. It sits below the executor's roles, not in the kubelet, because they all share its
names: the node's name (the client's Events report from it), the pods' address (the sandbox's
loopback) and :data:`LOCAL_PORTS` (written by the JobSet controller, read by the kubelet).

``fieldRef`` paths: ``metadata.name``, ``metadata.namespace``, ``metadata.uid``,
``metadata.labels['k']``, ``metadata.annotations['k']``, ``spec.nodeName`` (the node the pod
is bound to; ``local`` on the local plane),
``spec.serviceAccountName``, ``status.podIP`` / ``status.hostIP`` (and the plural forms) =
``127.0.0.1``. ``resourceFieldRef``: cpu rounded up to whole cores, memory and
ephemeral-storage in bytes, both divided by ``divisor``; an unset limit is this host's
capacity, an unset request 0.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from trainer.machinery.quantity import Quantity, QuantityError

LOCAL_PORTS = "trainer.kubeflow.org/local-ports"
"""Pod annotation: JSON ``{"<containerPort>": <hostPort>}`` written by the JobSet controller."""
LOOPBACK = "127.0.0.1"
NODE_NAME = "local"
MOUNT_ENV_PREFIX = "TRAINER_LOCAL_MOUNT_"
DEFAULT_FILE_MODE = 0o644

ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")
DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
PORT_OPTION = re.compile(r"^-{1,2}[\w.-]*port$", re.IGNORECASE)
# Private-use characters stand in for "$(VAR) of an exact mapped port" during rewriting; they
# match none of the rewrite patterns and are swapped for the host port afterwards.
_HOLE_OPEN, _HOLE_CLOSE = "\ue000", "\ue001"
_HOLE = re.compile(f"{_HOLE_OPEN}([0-9]+){_HOLE_CLOSE}")


class ConfigError(Exception):
    """The pod cannot be configured (yet): a missing ConfigMap, Secret or key, an unsupported
    field path. ``reason`` is the container waiting reason a kubelet reports."""

    def __init__(self, message: str, reason: str = "CreateContainerConfigError") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


@dataclass(frozen=True)
class Node:
    """This host's capacity, used where a kubelet uses node allocatable."""

    cpus: int = 1
    memory: int = 0
    ephemeral_storage: int = 0


@dataclass
class Sources:
    """The ConfigMaps and Secrets a pod references, read from the API by name (None: absent),
    and the service-account tokens its projected volumes need, by (audience, expiry)."""

    config_maps: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    secrets: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    tokens: dict[tuple[str, int], str] = field(default_factory=dict)


DEFAULT_TOKEN_EXPIRATION = 3600


def token_key(source: Mapping[str, Any]) -> tuple[str, int]:
    """(audience, expirationSeconds) of a ``serviceAccountToken`` projection ("" is the API
    server's own audience; the expiry defaults to an hour, as in the API)."""
    exp = source.get("expirationSeconds")
    return str(source.get("audience") or ""), int(DEFAULT_TOKEN_EXPIRATION if exp is None else exp)


def token_requests(pod: dict[str, Any]) -> set[tuple[str, int]]:
    """The tokens the pod's projected volumes need, as :func:`token_key` names them."""
    out: set[tuple[str, int]] = set()
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        for src in (vol.get("projected") or {}).get("sources") or []:
            if src.get("serviceAccountToken") is not None:
                out.add(token_key(src["serviceAccountToken"]))
    return out


def service_account(pod: dict[str, Any]) -> str:
    """The pod's service account (``default`` when unset)."""
    spec = pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


# --- $(VAR) expansion ---------------------------------------------------------------------------


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes ``$(VAR)`` expansion (``third_party/forked/golang/expansion``): ``$$`` is a
    literal ``$``; ``$(NAME)`` becomes ``lookup(NAME)``, or stays ``$(NAME)`` when that is None;
    an unterminated ``$(`` and a ``$`` before any other character stay as written."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    n = len(text)
    while cursor < n:
        if text[cursor] == "$" and cursor + 1 < n:
            out.append(text[checkpoint:cursor])
            nxt = text[cursor + 1]
            if nxt == "$":
                out.append("$")
                cursor += 1
            elif nxt == "(":
                close = text.find(")", cursor + 2)
                if close < 0:
                    out.append("$(")
                    cursor += 1
                else:
                    name = text[cursor + 2 : close]
                    value = lookup(name)
                    out.append(f"$({name})" if value is None else value)
                    cursor = close
            else:
                out.append("$" + nxt)
                cursor += 1
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def expand_env(text: str, env: Mapping[str, str]) -> str:
    """:func:`expand` against a mapping."""
    return expand(text, env.get)


# --- downward API -------------------------------------------------------------------------------


def pod_hostname(pod: dict[str, Any]) -> str:
    """``spec.hostname`` or the pod name (cut to 63 characters, like the kubelet)."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return str(spec.get("hostname") or meta.get("name") or "")[:63].rstrip("-.")


def _format_map(values: Mapping[str, Any]) -> str:
    return "\n".join(f"{k}={json.dumps(str(values[k]))}" for k in sorted(values))


def field_value(pod: dict[str, Any], field_path: str, *, volume: bool = False) -> str:
    """A ``fieldRef`` value. ``volume``: also the whole ``metadata.labels`` / ``annotations``
    (downwardAPI volumes), as sorted ``key="value"`` lines."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = _SUBSCRIPT.match(field_path)
    if m:
        return str((meta.get(m[1]) or {}).get(m[2], ""))
    simple: dict[str, str] = {
        "metadata.name": str(meta.get("name") or ""),
        "metadata.namespace": str(meta.get("namespace") or ""),
        "metadata.uid": str(meta.get("uid") or ""),
        "spec.nodeName": str(spec.get("nodeName") or NODE_NAME),
        "spec.serviceAccountName": str(spec.get("serviceAccountName") or "default"),
        "status.podIP": LOOPBACK,
        "status.podIPs": LOOPBACK,
        "status.hostIP": LOOPBACK,
        "status.hostIPs": LOOPBACK,
    }
    if field_path in simple:
        return simple[field_path]
    if volume and field_path in ("metadata.labels", "metadata.annotations"):
        return _format_map(meta.get(field_path.split(".")[1]) or {})
    raise ConfigError(
        f"unsupported fieldPath {field_path!r}: supported are metadata.name, metadata.namespace, "
        "metadata.uid, metadata.labels['<key>'], metadata.annotations['<key>'], spec.nodeName, "
        "spec.serviceAccountName, status.podIP, status.hostIP"
    )


def _quantity(raw: Any, what: str) -> Fraction:
    try:
        return Quantity.parse(raw).value
    except QuantityError as exc:
        raise ConfigError(f"{what}: {exc}") from None


def resource_value(container: dict[str, Any], resource: str, divisor: Any, node: Node) -> str:
    """A ``resourceFieldRef`` value: ``limits.cpu`` rounded up to whole ``divisor`` units (an
    unset limit is the host's core count), memory and ephemeral-storage in ``divisor`` units
    (bytes by default; an unset limit is the host's capacity), an unset request 0."""
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise ConfigError(
            f"unsupported resource {resource!r}: supported are limits.cpu, limits.memory, "
            "limits.ephemeral-storage, requests.cpu, requests.memory, requests.ephemeral-storage"
        )
    resources = container.get("resources") or {}
    raw = (resources.get(kind) or {}).get(name)
    if raw is None and kind == "requests":
        raw = (resources.get("limits") or {}).get(name)  # requests default to limits
    if raw is None:
        capacity = {"cpu": node.cpus, "memory": node.memory}.get(name, node.ephemeral_storage)
        value = Fraction(capacity) if kind == "limits" else Fraction(0)
    else:
        value = _quantity(raw, f"resources.{kind}.{name}")
    div = _quantity(divisor if divisor not in (None, "") else "1", "resourceFieldRef.divisor")
    if div <= 0:
        raise ConfigError(f"resourceFieldRef.divisor must be positive, got {divisor!r}")
    scale = 1000 if name == "cpu" else 1  # cpu: ceil(milli(value) / milli(divisor))
    units = Fraction(_ceil(value * scale), _ceil(div * scale))
    return str(_ceil(units))


def _ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)


def container_named(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        if c.get("name") == name:
            return dict(c)
    return None


# --- ConfigMaps and Secrets -----------------------------------------------------------------


def referenced_objects(pod: dict[str, Any]) -> tuple[set[str], set[str]]:
    """Names of the ConfigMaps and Secrets the pod reads (env, envFrom, volumes, projected)."""
    config_maps: set[str] = set()
    secrets: set[str] = set()
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for src in c.get("envFrom") or []:
            if (src.get("configMapRef") or {}).get("name"):
                config_maps.add(src["configMapRef"]["name"])
            if (src.get("secretRef") or {}).get("name"):
                secrets.add(src["secretRef"]["name"])
        for env in c.get("env") or []:
            value_from = env.get("valueFrom") or {}
            if (value_from.get("configMapKeyRef") or {}).get("name"):
                config_maps.add(value_from["configMapKeyRef"]["name"])
            if (value_from.get("secretKeyRef") or {}).get("name"):
                secrets.add(value_from["secretKeyRef"]["name"])
    for vol in spec.get("volumes") or []:
        if (vol.get("configMap") or {}).get("name"):
            config_maps.add(vol["configMap"]["name"])
        if (vol.get("secret") or {}).get("secretName"):
            secrets.add(vol["secret"]["secretName"])
        for src in (vol.get("projected") or {}).get("sources") or []:
            if (src.get("configMap") or {}).get("name"):
                config_maps.add(src["configMap"]["name"])
            if (src.get("secret") or {}).get("name"):
                secrets.add(src["secret"]["name"])
    return config_maps, secrets


def _secret_bytes(value: Any) -> bytes:
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        return str(value).encode()


def config_map_data(obj: dict[str, Any]) -> dict[str, bytes]:
    """A ConfigMap's keys as file contents (``data`` and base64 ``binaryData``)."""
    out = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    for k, v in (obj.get("binaryData") or {}).items():
        out[k] = _secret_bytes(v)
    return out


def secret_data(obj: dict[str, Any]) -> dict[str, bytes]:
    """A Secret's keys, decoded (``stringData`` too, should a server have kept it)."""
    out = {k: _secret_bytes(v) for k, v in (obj.get("data") or {}).items()}
    for k, v in (obj.get("stringData") or {}).items():
        out[k] = str(v).encode()
    return out


def as_text(data: bytes) -> str:
    return data.decode(errors="replace")
