"""What a pod's container sees when the local kubelet runs it as a host process: its argv,
environment, working directory and volumes, resolved the way a kubelet resolves them and then
mapped from "inside a pod on a cluster" to "a process on this host".

Everything here is pure (data in, data out) except :func:`write_volume`, which writes the files
a :class:`VolumePlan` describes.

Environment (Kubernetes semantics)
    ``envFrom`` sources first (in order, with ``prefix``; keys that are not valid variable names
    are skipped), then ``env`` in order; a later name overrides an earlier one. ``value`` is
    expanded with ``$(VAR)`` against the variables defined before it (``$$`` escapes a ``$``,
    an undefined reference stays as written). ``valueFrom``: ``fieldRef`` (``metadata.name``,
    ``metadata.namespace``, ``metadata.uid``, ``metadata.labels['k']``,
    ``metadata.annotations['k']``, ``spec.nodeName`` = ``local``, ``spec.serviceAccountName``,
    ``status.podIP`` / ``status.hostIP`` (and the plural forms) = ``127.0.0.1``),
    ``configMapKeyRef`` / ``secretKeyRef`` (``optional``), ``resourceFieldRef`` (cpu rounded up
    to whole cores, memory and ephemeral-storage in bytes, both divided by ``divisor``; an unset
    limit is this host's capacity, an unset request 0). ``command`` and ``args`` are expanded
    with the complete container environment. The process environment is the executor's own
    (``base``: PATH, HOME, PYTHONPATH, ... so the venv's ``python`` and ``torchrun`` are found)
    overlaid with the container's, plus ``HOSTNAME`` = the pod's hostname and one
    ``TRAINER_LOCAL_MOUNT_<VOLUME>`` per mounted volume (its directory on this host).
    A container without ``command`` runs its ``args`` (no image entrypoint exists locally).

Rewrites (applied once, in a single left-to-right pass, to env values, command and args)
    - Pod DNS: ``<host>.<subdomain>`` and ``<host>.<subdomain>.<ns>[.svc[.cluster.local]]`` (and
      the headless Service ``<subdomain>.<ns>.svc[.cluster.local]``) -> ``127.0.0.1``.
    - Ports: the JobSet controller records ``{"<containerPort>": <hostPort>}`` in the pod
      annotation ``trainer.kubeflow.org/local-ports`` (:data:`LOCAL_PORTS`). Rewritten:
      ``:<port>``, ``port=<port>`` (``--master_port=29500``), an env value that is exactly a
      mapped port, an argument that is exactly a mapped port and follows an option whose name
      ends in ``port`` (``--master-port 29500``), and ``$(VAR)`` references to a variable whose
      value is exactly a mapped port. So jobs running at once never collide on 29500.
    - Mount paths: each volumeMount's ``mountPath`` used as a path prefix (``/workspace``,
      ``/workspace/model``, ``file:///workspace``; not ``/workspace2`` or ``/a/workspace``) ->
      the directory that backs it on this host (``subPath`` / ``subPathExpr`` appended), longest
      mount path first. A ``workingDir`` inside a mount becomes the process's cwd; any other
      working directory is replaced by the directory ``trainer run`` started in.

Volumes (materialised per pod under ``<state_dir>/<ns>/<pod>/volumes/<name>``)
    ``emptyDir`` (any medium) and anything unknown: an empty directory. ``configMap`` /
    ``secret``: one file per key (``data`` and ``binaryData``; secrets decoded), or only
    ``items`` (key -> path, per-item ``mode``), files ``defaultMode`` (default 0644);
    ``optional`` tolerates a missing object. ``projected``: configMap, secret, downwardAPI and
    serviceAccountToken sources into one directory (the token is one the kubelet requested
    through TokenRequest for the pod's service account, bound to the pod: :func:`token_requests`
    says which; it is not refreshed while the pod runs). ``clusterTrustBundle`` is skipped.
    ``downwardAPI``: fieldRef / resourceFieldRef items (``metadata.labels`` and
    ``metadata.annotations`` as ``key="value"`` lines). ``persistentVolumeClaim``:
    ``<state_dir>/<ns>/pvc/<claimName>``, shared by every pod of the namespace that mounts the
    claim (an initializer and the trainer share its data). ``ephemeral``: a per-pod directory.
    ``hostPath``: the host path itself.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path, PurePosixPath
from typing import Any

from trainer.runtime.quantity import Quantity, QuantityError

LOCAL_PORTS = "trainer.kubeflow.org/local-ports"
"""Pod annotation: JSON ``{"<containerPort>": <hostPort>}`` written by the JobSet controller."""
LOOPBACK = "127.0.0.1"
NODE_NAME = "local"
MOUNT_ENV_PREFIX = "TRAINER_LOCAL_MOUNT_"
DEFAULT_FILE_MODE = 0o644

_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.*)'\]$")
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_PORT_OPTION = re.compile(r"^-{1,2}[\w.-]*port$", re.IGNORECASE)
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
        "spec.nodeName": NODE_NAME,
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


def _container(pod: dict[str, Any], name: str) -> dict[str, Any] | None:
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


def _text(data: bytes) -> str:
    return data.decode(errors="replace")


# --- environment --------------------------------------------------------------------------------


@dataclass
class EnvEntry:
    """One step of building a container's environment: ``name`` gets ``value`` (``template``
    is the ``value`` it was expanded from, None for envFrom / valueFrom values, which are taken
    literally)."""

    name: str
    value: str
    template: str | None = None


def resolve_env(
    pod: dict[str, Any], container: dict[str, Any], sources: Sources, node: Node
) -> tuple[list[EnvEntry], list[str]]:
    """The container's environment as a kubelet builds it (before any local rewrite), as the
    steps in definition order (a later step overrides an earlier one of the same name) and
    warnings such as skipped envFrom keys. Raises :class:`ConfigError` for a missing
    non-optional ConfigMap, Secret or key."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    env: dict[str, str] = {}
    entries: list[EnvEntry] = []
    warnings: list[str] = []
    for src in container.get("envFrom") or []:
        prefix = str(src.get("prefix") or "")
        if src.get("configMapRef"):
            ref = src["configMapRef"]
            obj = sources.config_maps.get(ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'configmap "{ref.get("name")}" not found')
            values = {k: str(v) for k, v in (obj.get("data") or {}).items()}
        elif src.get("secretRef"):
            ref = src["secretRef"]
            obj = sources.secrets.get(ref.get("name", ""))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'secret "{ref.get("name")}" not found')
            values = {k: _text(v) for k, v in secret_data(obj).items()}
        else:
            continue
        skipped = []
        for key in sorted(values):
            name = prefix + key
            if not _ENV_NAME.match(name):
                skipped.append(key)
                continue
            env[name] = values[key]
            entries.append(EnvEntry(name, values[key]))
        if skipped:
            warnings.append(
                f"container {container.get('name')!r}: skipped invalid environment variable "
                f"names from {ref.get('name')!r}: {', '.join(skipped)}"
            )
    for item in container.get("env") or []:
        name = str(item.get("name") or "")
        value_from = item.get("valueFrom")
        if not value_from:
            template = str(item.get("value") or "")
            env[name] = expand_env(template, env)
            entries.append(EnvEntry(name, env[name], template))
            continue
        value = _value_from(pod, container, namespace, value_from, sources, node)
        if value is not None:  # None: an optional reference that is absent, no variable
            env[name] = value
            entries.append(EnvEntry(name, value))
    return entries, warnings


def final_env(entries: Iterable[EnvEntry]) -> dict[str, str]:
    """The variables the steps leave (a later step of a name wins)."""
    return {e.name: e.value for e in entries}


def _value_from(
    pod: dict[str, Any],
    container: dict[str, Any],
    namespace: str,
    value_from: dict[str, Any],
    sources: Sources,
    node: Node,
) -> str | None:
    if value_from.get("fieldRef"):
        return field_value(pod, str(value_from["fieldRef"].get("fieldPath") or ""))
    if value_from.get("resourceFieldRef"):
        ref = value_from["resourceFieldRef"]
        target = container
        if ref.get("containerName"):
            target = _container(pod, ref["containerName"]) or container
        return resource_value(target, str(ref.get("resource") or ""), ref.get("divisor"), node)
    for field_name, kind, plural in (
        ("configMapKeyRef", "ConfigMap", "config_maps"),
        ("secretKeyRef", "Secret", "secrets"),
    ):
        ref = value_from.get(field_name)
        if not ref:
            continue
        name, key = str(ref.get("name") or ""), str(ref.get("key") or "")
        obj = getattr(sources, plural).get(name)
        if obj is None:
            if ref.get("optional"):
                return None
            raise ConfigError(f'{kind.lower()} "{name}" not found')
        if kind == "ConfigMap":
            data: Mapping[str, Any] = obj.get("data") or {}
            found = str(data[key]) if key in data else None
        else:
            decoded = secret_data(obj)
            found = _text(decoded[key]) if key in decoded else None
        if found is None:
            if ref.get("optional"):
                return None
            raise ConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
        return found
    raise ConfigError(
        "env valueFrom must set one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef"
    )


# --- rewriting ----------------------------------------------------------------------------------


def parse_ports(pod: dict[str, Any]) -> dict[int, int]:
    """The pod's port map (:data:`LOCAL_PORTS`); an absent or malformed annotation maps none."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(LOCAL_PORTS)
    if not raw:
        return {}
    try:
        decoded = json.loads(raw)
        return {int(k): int(v) for k, v in dict(decoded).items()}
    except (ValueError, TypeError):
        return {}


def _norm_mount(path: str) -> str:
    return "/" + "/".join(p for p in path.split("/") if p)


class Rewriter:
    """Rewrites pod DNS names, mapped ports and mount paths in strings, in one pass (a
    replacement is never rewritten again), remembering what it changed for a log line."""

    def __init__(
        self,
        *,
        subdomain: str = "",
        namespace: str = "",
        ports: Mapping[int, int] | None = None,
        mounts: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.ports = dict(ports or {})
        self.mounts = {_norm_mount(m): host for m, host in mounts if _norm_mount(m) != "/"}
        self.rewrites: dict[str, str] = {}
        alternatives: list[str] = []
        if subdomain:
            sub, ns = re.escape(subdomain), re.escape(namespace)
            suffix = rf"(?:\.{ns}(?:\.svc(?:\.cluster\.local)?)?)?" if namespace else ""
            service = rf"|{sub}\.{ns}\.svc(?:\.cluster\.local)?" if namespace else ""
            alternatives.append(
                rf"(?P<dns>(?<![\w.-])(?i:{_LABEL}\.{sub}{suffix}{service})"
                rf"(?![\w-]|\.[A-Za-z0-9]))"
            )
        if self.mounts:
            paths = "|".join(re.escape(m) for m in sorted(self.mounts, key=len, reverse=True))
            alternatives.append(rf"(?P<mount>(?<![\w.-])(?:{paths})(?![\w.-]))")
        if self.ports:
            numbers = "|".join(str(p) for p in sorted(self.ports, reverse=True))
            alternatives.append(rf"(?:(?<=:)|(?<=(?i:port)=))(?P<port>{numbers})(?!\d)")
        self._pattern = re.compile("|".join(alternatives)) if alternatives else None

    def _replace(self, m: re.Match[str]) -> str:
        groups = m.groupdict()
        if groups.get("dns") is not None:
            new = LOOPBACK
        elif groups.get("mount") is not None:
            new = self.mounts[m["mount"]]
        else:
            new = str(self.ports[int(m["port"])])
            self.rewrites[f":{m['port']}"] = f":{new}"
            return new
        self.rewrites[m[0]] = new
        return new

    def text(self, value: str) -> str:
        """``value`` with DNS names, ``:port`` / ``port=`` and mount paths rewritten."""
        if self._pattern is None:
            return value
        return self._pattern.sub(self._replace, value)

    def exact_port(self, value: str) -> str | None:
        """The host port when ``value`` is exactly a mapped port, else None."""
        if value.isdigit() and int(value) in self.ports:
            new = str(self.ports[int(value)])
            self.rewrites[value] = new
            return new
        return None

    def value(self, value: str) -> str:
        """An env value: an exact mapped port, else :meth:`text`."""
        exact = self.exact_port(value)
        return exact if exact is not None else self.text(value)

    def render(self, template: str, env: Mapping[str, str]) -> str:
        """``$(VAR)``-expand ``template`` with ``env`` and rewrite it once. A reference to a
        variable holding exactly a mapped port becomes the host port whatever surrounds it."""
        holes: list[str] = []

        def lookup(name: str) -> str | None:
            value = env.get(name)
            if value is None:
                return None
            exact = self.exact_port(value)
            if exact is None:
                return value
            holes.append(exact)
            return f"{_HOLE_OPEN}{len(holes) - 1}{_HOLE_CLOSE}"

        rewritten = self.text(expand(template, lookup))
        return _HOLE.sub(lambda m: holes[int(m[1])], rewritten) if holes else rewritten

    def argv(self, templates: list[str], env: Mapping[str, str]) -> list[str]:
        """:meth:`render` every argument; an argument that is exactly a mapped port after an
        option named ``...port`` (``--master_port 29500``) is mapped too."""
        out: list[str] = []
        for i, template in enumerate(templates):
            rendered = self.render(template, env)
            if i > 0 and _PORT_OPTION.match(templates[i - 1]):
                rendered = self.exact_port(rendered) or rendered
            out.append(rendered)
        return out

    def map_path(self, path: str) -> str | None:
        """The host path for a path inside a mount (longest mount first), else None."""
        norm = _norm_mount(path)
        for mount in sorted(self.mounts, key=len, reverse=True):
            if norm == mount or norm.startswith(mount + "/"):
                return self.mounts[mount] + norm[len(mount) :]
        return None


# --- volumes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VolumeFile:
    """One file of a configMap / secret / projected / downwardAPI volume."""

    path: str
    data: bytes
    mode: int


@dataclass
class VolumePlan:
    """A volume of the pod: the host directory that backs it, the files to write into it
    (for ``source == "files"``) and a note for the log when it is only approximated."""

    name: str
    source: str  # emptyDir | files | persistentVolumeClaim | hostPath
    path: str
    files: list[VolumeFile] = field(default_factory=list)
    note: str = ""
    create: bool = True


def pod_dir(state_dir: Path | str, pod: dict[str, Any]) -> Path:
    """``<state_dir>/<ns>/<pod>``: everything the kubelet keeps for one pod."""
    meta = pod.get("metadata") or {}
    return Path(state_dir) / str(meta.get("namespace") or "default") / str(meta.get("name"))


def _item_path(volume: str, path: str) -> str:
    parts = PurePosixPath(path).parts
    if not path or path.startswith("/") or ".." in parts:
        raise ConfigError(
            f'MountVolume.SetUp failed for volume "{volume}": item path {path!r} must be '
            "relative and must not contain '..'",
            reason="ContainerCreating",
        )
    return str(PurePosixPath(*parts))


def _key_files(
    volume: str,
    kind: str,
    name: str,
    obj: dict[str, Any] | None,
    spec: dict[str, Any],
    default_mode: int,
) -> list[VolumeFile]:
    if obj is None:
        if spec.get("optional"):
            return []
        raise ConfigError(
            f'MountVolume.SetUp failed for volume "{volume}": {kind.lower()} "{name}" not found',
            reason="ContainerCreating",
        )
    data = config_map_data(obj) if kind == "ConfigMap" else secret_data(obj)
    items = spec.get("items")
    if not items:
        return [VolumeFile(key, data[key], default_mode) for key in sorted(data)]
    files = []
    for item in items:
        key = str(item.get("key") or "")
        if key not in data:
            if spec.get("optional"):
                continue
            raise ConfigError(
                f'MountVolume.SetUp failed for volume "{volume}": {kind.lower()} "{name}" has '
                f"no key {key!r} (items[].key must name one of: {', '.join(sorted(data))})",
                reason="ContainerCreating",
            )
        mode = item.get("mode")
        files.append(
            VolumeFile(
                _item_path(volume, str(item.get("path") or key)),
                data[key],
                default_mode if mode is None else int(mode),
            )
        )
    return files


def _downward_files(
    volume: str, pod: dict[str, Any], items: list[dict[str, Any]], default_mode: int, node: Node
) -> list[VolumeFile]:
    files = []
    for item in items:
        if item.get("fieldRef"):
            value = field_value(pod, str(item["fieldRef"].get("fieldPath") or ""), volume=True)
        elif item.get("resourceFieldRef"):
            ref = item["resourceFieldRef"]
            target = _container(pod, str(ref.get("containerName") or "")) or {}
            value = resource_value(target, str(ref.get("resource") or ""), ref.get("divisor"), node)
        else:
            continue
        mode = item.get("mode")
        files.append(
            VolumeFile(
                _item_path(volume, str(item.get("path") or "")),
                value.encode(),
                default_mode if mode is None else int(mode),
            )
        )
    return files


def plan_volumes(
    pod: dict[str, Any], sources: Sources, state_dir: Path | str, node: Node
) -> list[VolumePlan]:
    """Where each of the pod's volumes lives on this host and what it contains."""
    base = pod_dir(state_dir, pod) / "volumes"
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    plans: list[VolumePlan] = []
    for vol in (pod.get("spec") or {}).get("volumes") or []:
        name = str(vol.get("name") or "")
        path = str(base / name)
        if "configMap" in vol or "secret" in vol:
            kind = "ConfigMap" if "configMap" in vol else "Secret"
            spec = vol.get("configMap") or vol.get("secret") or {}
            obj_name = str(spec.get("name") or spec.get("secretName") or "")
            objects = sources.config_maps if kind == "ConfigMap" else sources.secrets
            mode = spec.get("defaultMode")
            files = _key_files(
                name,
                kind,
                obj_name,
                objects.get(obj_name),
                spec,
                DEFAULT_FILE_MODE if mode is None else int(mode),
            )
            plans.append(VolumePlan(name, "files", path, files))
        elif "projected" in vol or "downwardAPI" in vol:
            spec = vol.get("projected") or vol.get("downwardAPI") or {}
            mode = spec.get("defaultMode")
            default_mode = DEFAULT_FILE_MODE if mode is None else int(mode)
            files = []
            notes = []
            sources_list = spec.get("sources") if "projected" in vol else [{"downwardAPI": spec}]
            for src in sources_list or []:
                if src.get("configMap") is not None or src.get("secret") is not None:
                    kind = "ConfigMap" if src.get("configMap") is not None else "Secret"
                    ref = src.get("configMap") or src.get("secret") or {}
                    objects = sources.config_maps if kind == "ConfigMap" else sources.secrets
                    obj_name = str(ref.get("name") or "")
                    files += _key_files(
                        name, kind, obj_name, objects.get(obj_name), ref, default_mode
                    )
                elif src.get("downwardAPI") is not None:
                    items = (src.get("downwardAPI") or {}).get("items") or []
                    files += _downward_files(name, pod, items, default_mode, node)
                elif src.get("serviceAccountToken") is not None:
                    sat = src["serviceAccountToken"]
                    token = sources.tokens.get(token_key(sat))
                    if token is None:
                        raise ConfigError(
                            f'MountVolume.SetUp failed for volume "{name}": no service account '
                            f"token for audience {token_key(sat)[0]!r}",
                            reason="ContainerCreating",
                        )
                    files.append(
                        VolumeFile(
                            _item_path(name, str(sat.get("path") or "")),
                            token.encode(),
                            default_mode,
                        )
                    )
                else:
                    notes.append(", ".join(sorted(src)))
            note = (
                f"projected sources not materialised locally: {'; '.join(notes)}" if notes else ""
            )
            plans.append(VolumePlan(name, "files", path, files, note))
        elif "persistentVolumeClaim" in vol:
            claim = str((vol.get("persistentVolumeClaim") or {}).get("claimName") or name)
            shared = Path(state_dir) / namespace / "pvc" / claim
            plans.append(VolumePlan(name, "persistentVolumeClaim", str(shared)))
        elif "hostPath" in vol:
            host = vol.get("hostPath") or {}
            plans.append(
                VolumePlan(
                    name,
                    "hostPath",
                    str(host.get("path") or "/"),
                    create=host.get("type") == "DirectoryOrCreate",
                )
            )
        else:
            known = ("emptyDir", "ephemeral")
            kinds = [k for k in vol if k != "name"]
            note = (
                ""
                if not kinds or kinds[0] in known
                else f"volume type {kinds[0]!r} is not supported locally: an empty directory"
            )
            plans.append(VolumePlan(name, "emptyDir", path, note=note))
    return plans


def write_volume(plan: VolumePlan) -> None:
    """Create the volume's directory and write its files (the one function here with I/O).
    Files are rewritten on every call, so a restarted kubelet refreshes them."""
    root = Path(plan.path)
    if plan.create:
        root.mkdir(parents=True, exist_ok=True)
    for f in plan.files:
        target = root / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.chmod(stat.S_IRUSR | stat.S_IWUSR)
        target.write_bytes(f.data)
        target.chmod(f.mode & 0o7777)


# --- containers ----------------------------------------------------------------------------------


def mount_env_name(volume: str) -> str:
    """``TRAINER_LOCAL_MOUNT_<VOLUME>``: upper case, other characters as ``_``."""
    return MOUNT_ENV_PREFIX + re.sub(r"[^A-Z0-9]", "_", volume.upper())


@dataclass
class ContainerPlan:
    """How one container runs as a host process."""

    name: str
    image: str
    argv: list[str]
    env: dict[str, str]
    """The container's own variables (rewritten) plus HOSTNAME and TRAINER_LOCAL_MOUNT_*; the
    process gets the executor's environment overlaid with these (:meth:`process_env`)."""
    cwd: str
    rewriter: Rewriter
    raw_env: dict[str, str]
    warnings: list[str] = field(default_factory=list)

    def process_env(self, base: Mapping[str, str]) -> dict[str, str]:
        return {**base, **self.env}

    def render(self, command: list[str]) -> list[str]:
        """Another command in this container's context (an exec probe)."""
        return self.rewriter.argv([str(a) for a in command], self.raw_env)


def plan_container(
    pod: dict[str, Any],
    container: dict[str, Any],
    *,
    sources: Sources,
    volumes: Mapping[str, str],
    workdir: Path | str,
    node: Node,
) -> ContainerPlan:
    """Resolve one container: env, argv and cwd, with every local rewrite applied.

    ``volumes`` maps a volume name to its host directory (:func:`plan_volumes`). Raises
    :class:`ConfigError` when the environment cannot be built (yet).
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    entries, warnings = resolve_env(pod, container, sources, node)
    raw_env = final_env(entries)
    mounts: list[tuple[str, str]] = []
    mount_env: dict[str, str] = {}
    for vm in container.get("volumeMounts") or []:
        vol_name = str(vm.get("name") or "")
        if vol_name not in volumes or not vm.get("mountPath"):
            warnings.append(
                f"container {container.get('name')!r}: volumeMount {vol_name!r} names no volume"
            )
            continue
        host = volumes[vol_name]
        sub = str(vm.get("subPath") or "")
        if not sub and vm.get("subPathExpr"):
            sub = expand_env(str(vm["subPathExpr"]), raw_env)
        if sub:
            host = str(Path(host) / _item_path(vol_name, sub))
        mounts.append((str(vm["mountPath"]), host))
        mount_env.setdefault(mount_env_name(vol_name), host)
    rewriter = Rewriter(
        subdomain=str(spec.get("subdomain") or ""),
        namespace=str(meta.get("namespace") or ""),
        ports=parse_ports(pod),
        mounts=mounts,
    )
    env: dict[str, str] = {}
    scope: dict[str, str] = {}
    for entry in entries:
        exact = rewriter.exact_port(entry.value)
        if exact is not None:
            env[entry.name] = exact
        elif entry.template is not None:
            env[entry.name] = rewriter.render(entry.template, scope)
        else:
            env[entry.name] = rewriter.text(entry.value)
        scope[entry.name] = entry.value
    command = [str(a) for a in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    argv = rewriter.argv([*command, *args], raw_env)
    working_dir = str(container.get("workingDir") or "")
    cwd = (rewriter.map_path(working_dir) if working_dir else None) or str(workdir)
    env.setdefault("HOSTNAME", pod_hostname(pod))
    for name, host in mount_env.items():
        env.setdefault(name, host)
    return ContainerPlan(
        name=str(container.get("name") or ""),
        image=str(container.get("image") or ""),
        argv=argv,
        env=env,
        cwd=cwd,
        rewriter=rewriter,
        raw_env=raw_env,
        warnings=warnings,
    )


def port_of(container: dict[str, Any], port: Any) -> int | None:
    """A probe's ``port`` (a number or a container port name) as a number."""
    if isinstance(port, int):
        return port
    text = str(port or "")
    if text.isdigit():
        return int(text)
    for p in container.get("ports") or []:
        if p.get("name") == text and p.get("containerPort") is not None:
            return int(p["containerPort"])
    return None


def host_port(pod: dict[str, Any], container: dict[str, Any], port: Any) -> int | None:
    """Where a container port listens on this host (mapped through :data:`LOCAL_PORTS`)."""
    number = port_of(container, port)
    if number is None:
        return None
    return parse_ports(pod).get(number, number)


def find_executable(argv0: str, cwd: str, path: str) -> str | None:
    """``argv0`` as the process would find it: relative to ``cwd`` when it has a slash, else on
    ``path`` (reads the filesystem)."""
    if "/" in argv0:
        full = argv0 if os.path.isabs(argv0) else os.path.join(cwd, argv0)
        return full if os.path.isfile(full) and os.access(full, os.X_OK) else None
    for directory in path.split(os.pathsep):
        full = os.path.join(directory or ".", argv0)
        if not os.path.isabs(full):
            full = os.path.join(cwd, full)
        if os.path.isfile(full) and os.access(full, os.X_OK):
            return full
    return None
