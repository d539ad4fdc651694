"""What a pod's container sees when the local kubelet runs it as a host process: its argv,
environment and working directory, resolved the way a kubelet resolves them and then mapped
from "inside a pod on a cluster" to "a process on this host".

Pure (data in, data out) but for :func:`find_executable`, which looks at the filesystem. The
pieces it is built from: :mod:`~trainer.local.executor.policy.podfields` (downward API, ``$(VAR)``,
ConfigMaps and Secrets), :mod:`~trainer.local.executor.kubelet.policy.rewrites` (DNS, port and
mount-path rewrites) and :mod:`~trainer.local.executor.kubelet.policy.volumes` (the volumes a
container mounts).

Environment (Kubernetes semantics)
    ``envFrom`` sources first (in order, with ``prefix``; keys that are not valid variable names
    are skipped), then ``env`` in order; a later name overrides an earlier one. ``value`` is
    expanded with ``$(VAR)`` against the variables defined before it (``$$`` escapes a ``$``, an
    undefined reference stays as written). ``valueFrom``: ``fieldRef`` and ``resourceFieldRef``
    (the downward API of :mod:`~trainer.local.executor.policy.podfields`), ``configMapKeyRef`` /
    ``secretKeyRef`` (``optional``). ``command`` and ``args`` are expanded with the complete
    container environment. The process environment is the executor's own (``base``: PATH, HOME,
    PYTHONPATH, ... so the venv's ``python`` and ``torchrun`` are found) overlaid with the
    container's, plus ``HOSTNAME`` = the pod's hostname and one ``TRAINER_LOCAL_MOUNT_<VOLUME>``
    per mounted volume (its directory on this host), and ``TMPDIR`` = the volume mounted at
    ``/tmp`` when there is one. A container without ``command`` runs its image's entrypoint
    when it is one of this project's images (:data:`IMAGE_ENTRYPOINTS`), else its ``args``
    (no other image's entrypoint is known locally).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.local.executor.kubelet.policy import termination
from trainer.local.executor.kubelet.policy.rewrites import Rewriter, parse_ports
from trainer.local.executor.kubelet.policy.volumes import item_path
from trainer.local.executor.policy.podfields import (
    ENV_NAME,
    MOUNT_ENV_PREFIX,
    ConfigError,
    Node,
    Sources,
    as_text,
    container_named,
    expand_env,
    field_value,
    pod_hostname,
    resource_value,
    secret_data,
)

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
            values = {k: as_text(v) for k, v in secret_data(obj).items()}
        else:
            continue
        skipped = []
        for key in sorted(values):
            name = prefix + key
            if not ENV_NAME.match(name):
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
            target = container_named(pod, ref["containerName"]) or container
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
            found = as_text(decoded[key]) if key in decoded else None
        if found is None:
            if ref.get("optional"):
                return None
            raise ConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
        return found
    raise ConfigError(
        "env valueFrom must set one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef"
    )


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
    termination_file: str = "",
) -> ContainerPlan:
    """Resolve one container: env, argv and cwd, with every local rewrite applied.

    ``volumes`` maps a volume name to its host directory (:func:`plan_volumes`);
    ``termination_file`` is the host file that stands for the container's
    ``terminationMessagePath`` (:mod:`~trainer.local.executor.kubelet.policy.termination`), mapped
    as a mount path is. Raises :class:`ConfigError` when the environment cannot be built (yet).
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
            host = str(Path(host) / item_path(vol_name, sub))
        mounts.append((str(vm["mountPath"]), host))
        mount_env.setdefault(mount_env_name(vol_name), host)
    if termination_file:
        # As the kubelet mounts the file at that path, over any volume mounted above it.
        mounts.append((termination.message_path(container), termination_file))
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
    command = [str(a) for a in container.get("command") or []] or image_entrypoint(
        str(container.get("image") or "")
    )
    args = [str(a) for a in container.get("args") or []]
    argv = rewriter.argv([*command, *args], raw_env)
    working_dir = str(container.get("workingDir") or "")
    cwd = (rewriter.map_path(working_dir) if working_dir else None) or str(workdir)
    env.setdefault("HOSTNAME", pod_hostname(pod))
    for name, host in mount_env.items():
        env.setdefault(name, host)
    if termination_file:
        env.setdefault(termination.ENV, termination_file)
    if "/tmp" in rewriter.mounts:
        # A volume at /tmp: programs that make temporary files (Python's tempfile, mktemp)
        # make them there, in the pod's own directory, as in the container's /tmp.
        env.setdefault("TMPDIR", rewriter.mounts["/tmp"])
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


IMAGE_ENTRYPOINTS: dict[str, list[str]] = {
    "trainer-py": ["trainer", "controller"],
    "trainer-py-data-cache": ["trainer", "data-cache", "serve"],
}
"""The entrypoints of this project's own images (the Dockerfile's ``ENTRYPOINT`` of each
target), by repository name: a container of one of them that sets no ``command`` runs that
program from this host's install, as the image would run it (docs/local-plane.md, "Workloads
and Services")."""


def image_entrypoint(image: str) -> list[str]:
    """The entrypoint of ``image`` when the plane knows it (any registry or tag of
    :data:`IMAGE_ENTRYPOINTS`' repositories), else ``[]``."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    repository = last.split(":", 1)[0]
    return list(IMAGE_ENTRYPOINTS.get(repository, []))


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
