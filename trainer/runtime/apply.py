"""Small upsert helpers over the pod-spec models, shared by the plugins.

"Upsert" keeps an existing item's position and replaces it, or appends a new one, like
upstream's ``apply.Upsert*`` helpers.
"""

from __future__ import annotations

from collections.abc import Iterable

from trainer.api.core import (
    Container,
    ContainerPort,
    EnvFromSource,
    EnvVar,
    EnvVarSource,
    ObjectFieldSelector,
    PodSpec,
    Volume,
    VolumeMount,
)


def env(name: str, value: str) -> EnvVar:
    return EnvVar(name=name, value=value)


def env_from_field(name: str, field_path: str) -> EnvVar:
    return EnvVar(
        name=name, value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path=field_path))
    )


def upsert_env(container: Container, envs: Iterable[EnvVar]) -> None:
    current = list(container.env or [])
    for item in envs:
        for i, existing in enumerate(current):
            if existing.name == item.name:
                current[i] = item.model_copy(deep=True)
                break
        else:
            current.append(item.model_copy(deep=True))
    container.env = current


def upsert_port(container: Container, port: ContainerPort) -> None:
    """Add ``port`` unless an equal port (same number and protocol, or same name) exists.

    Upstream replaces the first *unnamed* port with an unnamed injected one; we never
    clobber a port the runtime declared (spec: corrections to section 2).
    """
    ports = list(container.ports or [])
    for i, existing in enumerate(ports):
        if existing.container_port == port.container_port and existing.protocol == port.protocol:
            return
        if port.name is not None and existing.name == port.name:
            ports[i] = port.model_copy(deep=True)
            container.ports = ports
            return
    ports.append(port.model_copy(deep=True))
    container.ports = ports


def upsert_volume(pod: PodSpec, volume: Volume) -> None:
    volumes = list(pod.volumes or [])
    for i, existing in enumerate(volumes):
        if existing.name == volume.name:
            volumes[i] = volume.model_copy(deep=True)
            break
    else:
        volumes.append(volume.model_copy(deep=True))
    pod.volumes = volumes


def upsert_volume_mount(container: Container, mount: VolumeMount) -> None:
    mounts = list(container.volume_mounts or [])
    for i, existing in enumerate(mounts):
        if existing.mount_path == mount.mount_path:
            mounts[i] = mount.model_copy(deep=True)
            break
    else:
        mounts.append(mount.model_copy(deep=True))
    container.volume_mounts = mounts


def append_env_from(container: Container, source: EnvFromSource) -> None:
    container.env_from = [*(container.env_from or []), source.model_copy(deep=True)]


def find_container(pod: PodSpec, name: str) -> Container | None:
    """A regular container named ``name``, else an init container of that name."""
    for ctr in pod.containers or []:
        if ctr.name == name:
            return ctr
    for ctr in pod.init_containers or []:
        if ctr.name == name:
            return ctr
    return None


def regular_container(pod: PodSpec, name: str) -> Container | None:
    for ctr in pod.containers or []:
        if ctr.name == name:
            return ctr
    return None
