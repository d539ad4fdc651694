"""The pod side of :mod:`~trainer.local.executor.sandbox.ssh`: applied to each container's plan once
the pod's volumes are planned (the kubelet's step 1), before anything runs.

An sshd container's argv gets the executor's sshd config; a container that mounts a
``kubernetes.io/ssh-auth`` Secret gets the ssh client wrapper on its PATH (and, when the
executor runs as root, OpenMPI's run-as-root variables). Other containers are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.local.executor.kubelet.podhost import host_env_path
from trainer.local.executor.kubelet.policy.podenv import ContainerPlan, find_executable
from trainer.local.executor.policy import sshports
from trainer.local.executor.policy.podfields import Sources, pod_hostname
from trainer.local.executor.sandbox import ssh


def prepare(
    pod: dict[str, Any],
    container: Mapping[str, Any],
    plan: ContainerPlan,
    *,
    sources: Sources,
    volumes: Mapping[str, str],
    pod_dir: Path,
    base_env: Mapping[str, str],
) -> bool:
    """Set up ssh for one container (mutating ``plan``); True when it uses ssh. Raises
    :class:`~trainer.local.executor.sandbox.ssh.SSHSetupError`."""
    auth_dir = ssh.ssh_auth_mount(pod, container, sources.secrets, volumes)
    env = plan.process_env(base_env)
    # An sshd this host lacks is left to the container start, which reports it (exit 127).
    sshd = (
        sshports.is_sshd(container)
        and bool(plan.argv)
        and (find_executable(plan.argv[0], plan.cwd, host_env_path(env)) is not None)
    )
    if auth_dir is None and not sshd:
        return False
    files = ssh.Files(pod_dir / "ssh")
    if sshd:
        plan.argv = ssh.sshd_setup(files, pod, pod_hostname(pod), plan.argv, auth_dir, env)
    if auth_dir is not None:
        plan.env.update(ssh.client_setup(files, pod, auth_dir, env))
    return True
