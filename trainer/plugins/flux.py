"""The Flux plugin: runs the trainer command under a Flux instance spanning the trainer pods
(upstream: https://github.com/kubeflow/trainer/tree/v2.3.0/pkg/runtime/framework/plugins/flux),
bootstrapped without SSH. Active iff ``mlPolicy.flux`` is set.

EnforceMLPolicy (on the trainer step, i.e. the job labelled ``trainjob-ancestor-step:
trainer``, else the job named ``node``) writes upstream's pod template exactly (names, paths,
``readOnly``, order, ``defaultMode``; Kueue computes a TrainJob's JobSet with upstream's code):

* the ``node`` container's command becomes
  ``["/bin/bash", "/etc/flux-config/entrypoint.sh", "<command line>"]``, the command line being
  the command (the TrainJob's, else the runtime's) and the TrainJob's args; the container
  keeps the runtime's args, as upstream's does (it drops only the TrainJob's). The
  entrypoint starts a broker on every pod and, from rank 0, runs with ``flux run`` the
  command line followed by the container's args when the TrainJob gave none (upstream
  appends them always, so a TrainJob's args would get the runtime's after them). Beyond
  upstream, the command line is ``shlex.join``-ed, not joined with spaces: upstream's
  ``python3 -c "print('a b')"`` becomes ``python3 -c print('a b')``, which its entrypoint
  word-splits into a broken command; with words that need no quoting the two are the same;
* init container ``flux-installer`` (the Flux view image, ``FLUX_VIEW_IMAGE`` overrides it)
  mounts ``flux-install`` at ``/mnt/flux`` and the scripts (read-only) at ``/etc/flux-config``;
  it copies Flux's view and the spack software tree into ``/mnt/flux``;
* volumes, in this order: ``spack-install`` (emptyDir), ``flux-install`` (emptyDir),
  ``<job>-flux-entrypoint`` (ConfigMap ``<job>-flux-entrypoint``, defaultMode 0755, every key),
  ``shared-memory`` (emptyDir in memory) and ``flux-curve`` (Secret ``<job>-flux-curve``,
  defaultMode 0400, every key);
* ``node`` mounts ``flux-install`` at ``/mnt/flux``, ``spack-install`` at ``/opt/software``
  (the entrypoint copies the software tree there: the view's links point into it), and
  read-only: the scripts at ``/etc/flux-config``, the certificate at ``/curve`` and
  ``shared-memory`` at ``/dev/shm`` (upstream mounts it read-only; Flux itself does not write
  there, but a program that needs a writable ``/dev/shm`` does not get one).

The ConfigMap volume is named after the TrainJob, so a TrainJob name over 47 characters makes
a volume name over 63, which the Job API refuses; admission's name budget
(:mod:`trainer.jobset.budget`) counts it.

The pod count comes from ``trainer.numNodes``, set when the Info is assembled
(:mod:`trainer.runtime.podsets`); this plugin does not set it again.

Build: ConfigMap ``<job>-flux-entrypoint`` (``init.sh``, ``entrypoint.sh`` with every trainer
host written out) and Secret ``<job>-flux-curve`` (``curve.cert``: a ZeroMQ CURVE certificate
whose X25519 key is sha256 of the TrainJob UID, so every build writes the same Secret and all
brokers share it). Both carry the controller ownerReference.

Settings read from the ``node`` container's env (the runtime's, overridden by the TrainJob's
``trainer.env``): ``FLUX_VIEW_IMAGE``, ``FLUX_NETWORK_DEVICE`` (``eth0``), ``FLUX_QUEUE_POLICY``
(``fcfs``).
"""

from __future__ import annotations

import base64
import hashlib
import re
import shlex
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from trainer.api import constants as c
from trainer.api.v1alpha1 import TrainJob
from trainer.machinery.errors import INVALID, FieldError
from trainer.machinery.models.core import (
    ConfigMapVolumeSource,
    Container,
    SecretVolumeSource,
    Volume,
    VolumeMount,
)
from trainer.plugins import flux_scripts as scripts
from trainer.runtime import apply, z85
from trainer.runtime.info import BuildContext, BuildError, Info, PodSet
from trainer.runtime.objects import object_meta
from trainer.runtime.validation import ClusterView, Verdict

DEFAULT_VIEW_IMAGE = "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy"
DEFAULT_NETWORK_DEVICE = "eth0"
DEFAULT_QUEUE_POLICY = "fcfs"

ENV_VIEW_IMAGE = "FLUX_VIEW_IMAGE"
ENV_NETWORK_DEVICE = "FLUX_NETWORK_DEVICE"
ENV_QUEUE_POLICY = "FLUX_QUEUE_POLICY"

QUEUE_POLICIES = ("fcfs", "easy", "hybrid", "conservative")
"""Fluxion's queue policies (``sched-fluxion-qmanager.queue-policy``)."""
_DEVICE = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
"""A Linux network interface name (at most 15 characters, no spaces or slashes)."""

ENTRYPOINT_KEY = "entrypoint.sh"
INIT_KEY = "init.sh"

VOLUME_SPACK_INSTALL = "spack-install"
VOLUME_FLUX_INSTALL = "flux-install"
VOLUME_SHARED_MEMORY = "shared-memory"
VOLUME_CURVE = "flux-curve"
SHARED_MEMORY_DIR = "/dev/shm"

CONFIG_MODE = 0o755
"""The scripts are executable."""
CURVE_MODE = 0o400
"""The certificate holds the instance's secret key."""

CURVE_CERT_HEADER = "#   ****  Generated by the Kubeflow Trainer  ****"


def entrypoint_name(job: str) -> str:
    return f"{job}{c.FLUX_ENTRYPOINT_SUFFIX}"


def curve_name(job: str) -> str:
    return f"{job}{c.FLUX_CURVE_SUFFIX}"


def active(info: Info) -> bool:
    return info.ml_policy is not None and info.ml_policy.flux is not None


def flux_pod_set(info: Info) -> PodSet | None:
    """The pods Flux spans: the trainer step, else the replicated job named ``node``."""
    return info.trainer_pod_set() or info.pod_set(c.JOB_NODE)


@dataclass(frozen=True)
class Settings:
    """What a user may change through the ``node`` container's env."""

    view_image: str = DEFAULT_VIEW_IMAGE
    network_device: str = DEFAULT_NETWORK_DEVICE
    queue_policy: str = DEFAULT_QUEUE_POLICY


def settings(node: Container, info: Info) -> Settings:
    """The Flux settings from the env of ``node`` and the TrainJob's ``trainer.env``, which
    wins (plain values only; it reaches the container when the JobSet is built, after this
    plugin's phase: trainer.runtime.assemble.apply_trainer_env). Raises :class:`BuildError`
    for a value Flux cannot use."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    values = {
        e.name: e.value
        for e in [*(node.env or []), *((trainer.env if trainer else None) or [])]
        if e.value is not None
    }
    found = Settings(
        view_image=values.get(ENV_VIEW_IMAGE, DEFAULT_VIEW_IMAGE),
        network_device=values.get(ENV_NETWORK_DEVICE, DEFAULT_NETWORK_DEVICE),
        queue_policy=values.get(ENV_QUEUE_POLICY, DEFAULT_QUEUE_POLICY),
    )
    where = "spec.trainer.env"
    if not found.view_image or any(ch.isspace() for ch in found.view_image):
        raise BuildError(
            f"{where}: {ENV_VIEW_IMAGE} {found.view_image!r} is not an image reference; "
            f"accepted: an image such as {DEFAULT_VIEW_IMAGE!r}"
        )
    if not _DEVICE.match(found.network_device):
        raise BuildError(
            f"{where}: {ENV_NETWORK_DEVICE} {found.network_device!r} is not a network interface "
            "name; accepted: 1-15 characters of letters, digits and _ . : @ - (e.g. 'eth0')"
        )
    if found.queue_policy not in QUEUE_POLICIES:
        raise BuildError(
            f"{where}: {ENV_QUEUE_POLICY} {found.queue_policy!r} is not supported; "
            f"accepted: {', '.join(QUEUE_POLICIES)}"
        )
    return found


def _node_container(info: Info) -> tuple[PodSet, Container]:
    ps = flux_pod_set(info)
    node = ps.container(c.CONTAINER_NODE) if ps is not None else None
    if ps is None or node is None:
        raise BuildError(
            "spec.runtimeRef: a Flux runtime needs a replicated job labelled "
            f"{c.LABEL_ANCESTOR}={c.ANCESTOR_TRAINER} (or named {c.JOB_NODE!r}) with a "
            f"container named {c.CONTAINER_NODE!r}"
        )
    return ps, node


def _procs_per_node(info: Info) -> int:
    flux = info.ml_policy.flux if info.ml_policy is not None else None
    procs = flux.num_proc_per_node if flux is not None else 1
    if procs < 1:
        raise BuildError(
            f"spec.mlPolicy.flux.numProcPerNode: {procs} must be greater than or equal to 1"
        )
    return procs


def trainjob_args(info: Info) -> list[str] | None:
    """The TrainJob's own ``trainer.args`` (None when it gives none)."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    return list(trainer.args) if trainer is not None and trainer.args is not None else None


def _runtime_args(info: Info, ps: PodSet, node: Container) -> list[str] | None:
    """The ``node`` container's args as the runtime has them (the TrainJob's own replaced
    them in the Info; runtimePatches cannot set args)."""
    if trainjob_args(info) is None:
        return node.args
    spec = info.runtime.spec
    jobs = spec.template.spec.replicated_jobs if spec and spec.template.spec else None
    for job in jobs or []:
        job_spec = job.template.spec
        pod = job_spec.template.spec if job.name == ps.name and job_spec is not None else None
        for ctr in (pod.containers if pod is not None else None) or []:
            if ctr.name == c.CONTAINER_NODE:
                return ctr.args
    return None


def _clear(container: Container, field: str) -> None:
    """Unset ``field`` so the wire form omits it (as Go's omitempty does) instead of ``null``."""
    setattr(container, field, None)
    container.model_fields_set.discard(field)


def _upsert_init_container(ps: PodSet, container: Container) -> None:
    """Replace the init container of the same name, or append ``container``."""
    pod = ps.pod_spec
    inits = list(pod.init_containers or [])
    for i, existing in enumerate(inits):
        if existing.name == container.name:
            inits[i] = container
            break
    else:
        inits.append(container)
    pod.init_containers = inits


def config_volume_name(job: str) -> str:
    """The ConfigMap volume is named as its ConfigMap, ``<job>-flux-entrypoint``."""
    return entrypoint_name(job)


def _volumes(job: str) -> list[Volume]:
    """Upstream's volumes in upstream's order; the ConfigMap and the Secret volumes project
    every key (no ``items``)."""
    return [
        Volume(name=VOLUME_SPACK_INSTALL, empty_dir={}),
        Volume(name=VOLUME_FLUX_INSTALL, empty_dir={}),
        Volume(
            name=config_volume_name(job),
            config_map=ConfigMapVolumeSource(name=entrypoint_name(job), default_mode=CONFIG_MODE),
        ),
        Volume(name=VOLUME_SHARED_MEMORY, empty_dir={"medium": "Memory"}),
        Volume(
            name=VOLUME_CURVE,
            secret=SecretVolumeSource(secret_name=curve_name(job), default_mode=CURVE_MODE),
        ),
    ]


def _node_mounts(job: str) -> list[VolumeMount]:
    return [
        VolumeMount(name=VOLUME_FLUX_INSTALL, mount_path=scripts.FLUX_DIR),
        VolumeMount(name=VOLUME_SPACK_INSTALL, mount_path=scripts.SOFTWARE_DIR),
        VolumeMount(name=config_volume_name(job), mount_path=scripts.CONFIG_DIR, read_only=True),
        VolumeMount(name=VOLUME_CURVE, mount_path=scripts.CURVE_DIR, read_only=True),
        VolumeMount(name=VOLUME_SHARED_MEMORY, mount_path=SHARED_MEMORY_DIR, read_only=True),
    ]


def _installer(job: str, image: str) -> Container:
    return Container(
        name=c.CONTAINER_FLUX_INSTALLER,
        image=image,
        command=["/bin/bash", f"{scripts.CONFIG_DIR}/{INIT_KEY}"],
        volume_mounts=[
            VolumeMount(name=VOLUME_FLUX_INSTALL, mount_path=scripts.FLUX_DIR),
            VolumeMount(
                name=config_volume_name(job), mount_path=scripts.CONFIG_DIR, read_only=True
            ),
        ],
    )


def hosts(info: Info, ps: PodSet) -> list[scripts.Host]:
    """The brokers in rank order: the pods of ``ps`` as
    ``<job>-<rjob>-<replica>-<pod>.<subdomain>``. The trainer step always runs one replica
    (the JobSet builder forces it, possibly after this plugin ran), so it contributes the
    first replica's pods only."""
    endpoints = ps.endpoints(info.name, info.subdomain)
    if ps.ancestor == c.ANCESTOR_TRAINER:
        endpoints = endpoints[: ps.count]
    return [scripts.Host(name=e.split(".", 1)[0], address=e) for e in endpoints]


def curve_certificate(job: str, uid: str) -> str:
    """A ZeroMQ CURVE certificate (czmq text format) for ``job``: the secret key is
    sha256(``uid``), the public key its X25519 image, both Z85-encoded. Same UID, same text."""
    secret = hashlib.sha256(uid.encode()).digest()
    public = (
        X25519PrivateKey.from_private_bytes(secret)
        .public_key()
        .public_bytes(Encoding.Raw, PublicFormat.Raw)
    )
    return (
        f"{CURVE_CERT_HEADER}\n"
        "metadata\n"
        f'    name = "{job}"\n'
        "curve\n"
        f'    public-key = "{z85.encode(public)}"\n'
        f'    secret-key = "{z85.encode(secret)}"\n'
    )


def validate(info: Info) -> list[FieldError]:
    """Admission check on the runtime (before any plugin ran): ``flux-installer`` is the
    plugin's own init container name, so the runtime's ``node`` job may not use it."""
    if not active(info):
        return []
    ps = flux_pod_set(info)
    if ps is None:
        return []
    return [
        FieldError(
            "spec.trainer.initContainers",
            INVALID,
            "InitContainer 'flux-installer' is reserved",
            value=ic.name,
        )
        for ic in ps.pod_spec.init_containers or []
        if ic.name == c.CONTAINER_FLUX_INSTALLER
    ]


class FluxPlugin:
    """Flux bootstrap for ``mlPolicy.flux`` runtimes (see the module docstring)."""

    name = "Flux"

    def validate(self, info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
        return Verdict([], validate(info))

    def enforce_ml_policy(self, info: Info) -> None:
        if not active(info):
            return
        ps, node = _node_container(info)
        found = settings(node, info)
        original = shlex.join([*(node.command or []), *(trainjob_args(info) or [])])
        node.command = [
            "/bin/bash",
            f"{scripts.CONFIG_DIR}/{ENTRYPOINT_KEY}",
            original,
        ]
        runtime_args = _runtime_args(info, ps, node)
        if runtime_args:
            node.args = list(runtime_args)
        else:
            _clear(node, "args")
        for volume in _volumes(info.name):
            apply.upsert_volume(ps.pod_spec, volume)
        for mount in _node_mounts(info.name):
            apply.upsert_volume_mount(node, mount)
        _upsert_init_container(ps, _installer(info.name, found.view_image))

    def build(self, info: Info, ctx: BuildContext) -> list[dict[str, Any]]:
        if not active(info):
            return []
        ps, node = _node_container(info)
        found = settings(node, info)
        job = info.name
        config_map = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": object_meta(info.trainjob, entrypoint_name(job)),
            "data": {
                ENTRYPOINT_KEY: scripts.entrypoint_script(
                    job,
                    hosts(info, ps),
                    found.network_device,
                    found.queue_policy,
                    _procs_per_node(info),
                    runtime_args=trainjob_args(info) is None,
                ),
                INIT_KEY: scripts.init_script(job, found.view_image),
            },
        }
        uid = (info.trainjob.metadata.uid if info.trainjob.metadata else None) or ""
        cert = curve_certificate(job, uid)
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": object_meta(info.trainjob, curve_name(job)),
            "type": "Opaque",
            "data": {scripts.CURVE_FILE: base64.b64encode(cert.encode()).decode("ascii")},
        }
        return [config_map, secret]
