"""A pod's volumes on this host: which directory backs each volume and which files to write
into it, planned purely (:func:`plan_volumes`) and written by :func:`write_volume`.

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

File modes and ``fsGroup``
    On a cluster the kubelet owns these files (root) and gives them group ``fsGroup``, which
    the container's user is in: a mode's group bits are how that user reads them (the MPI
    plugin's ``id_rsa`` is 0640 for that reason). Locally the pod's processes run as you and
    you own the files, so with ``fsGroup`` set the group bits are dropped (:func:`local_mode`):
    the owner bits are what the processes use, and the host's group (not the pod's) gets no
    access. Without ``fsGroup`` modes are written as given. Real OpenSSH refuses a private
    key its owner's group or others can read, so this is what makes the generated key usable
    locally (docs/local-plane.md, "MPI on the local plane").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trainer.local.executor.policy.podfields import (
    DEFAULT_FILE_MODE,
    ConfigError,
    Node,
    Sources,
    config_map_data,
    container_named,
    field_value,
    resource_value,
    secret_data,
    token_key,
)
from trainer.machinery.files import write_file


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


def item_path(volume: str, path: str) -> str:
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
                item_path(volume, str(item.get("path") or key)),
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
            target = container_named(pod, str(ref.get("containerName") or "")) or {}
            value = resource_value(target, str(ref.get("resource") or ""), ref.get("divisor"), node)
        else:
            continue
        mode = item.get("mode")
        files.append(
            VolumeFile(
                item_path(volume, str(item.get("path") or "")),
                value.encode(),
                default_mode if mode is None else int(mode),
            )
        )
    return files


def local_mode(mode: int, fs_group: int | None) -> int:
    """The mode a volume file gets locally: ``mode`` without its group bits when the pod sets
    ``fsGroup`` (see the module docstring)."""
    return mode & ~0o070 if fs_group is not None else mode


def fs_group(pod: dict[str, Any]) -> int | None:
    value = ((pod.get("spec") or {}).get("securityContext") or {}).get("fsGroup")
    return int(value) if isinstance(value, int) else None


def plan_volumes(
    pod: dict[str, Any], sources: Sources, state_dir: Path | str, node: Node
) -> list[VolumePlan]:
    """Where each of the pod's volumes lives on this host and what it contains."""
    plans = _plan_volumes(pod, sources, state_dir, node)
    group = fs_group(pod)
    if group is not None:
        for plan in plans:
            plan.files = [VolumeFile(f.path, f.data, local_mode(f.mode, group)) for f in plan.files]
    return plans


def _plan_volumes(
    pod: dict[str, Any], sources: Sources, state_dir: Path | str, node: Node
) -> list[VolumePlan]:
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
                            item_path(name, str(sat.get("path") or "")),
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
        # Created with its final mode (a Secret's key is never briefly 0644) and renamed over
        # the old file, which may be read-only.
        write_file(target, f.data, f.mode & 0o7777)
