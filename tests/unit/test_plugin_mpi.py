"""The MPI plugin (kubeflow/trainer#3262, #3712): counts, slots, SSH/hostfile volumes, launcher
env, the SSH Secret and the hostfile ConfigMap, as a user sees them in the rendered objects."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_ssh_public_key

from tests import builders as b
from trainer.api.load import check_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainJob
from trainer.plugins.jobset import JobSetPlugin
from trainer.plugins.mpi import MPIPlugin
from trainer.plugins.registry import render
from trainer.runtime.assemble import new_info
from trainer.runtime.framework import Framework
from trainer.runtime.info import BuildContext, BuildError, Observed, SSHKeyPair
from trainer.runtime.sshkeys import generate_ssh_keypair

FRAMEWORK = Framework([MPIPlugin(), JobSetPlugin()])

FAKE_KEYS = SSHKeyPair(
    private_pem=b"-----BEGIN EC PRIVATE KEY-----\nfake\n-----END EC PRIVATE KEY-----\n",
    public_authorized_key=b"ecdsa-sha2-nistp521 AAAAfake\n",
)


def fake_keygen() -> SSHKeyPair:
    return FAKE_KEYS


def failing_keygen() -> SSHKeyPair:
    raise AssertionError("the SSH key generator must not be called when the Secret exists")


CTX = BuildContext(ssh_keygen=fake_keygen)

# The shape of the shipped deepspeed runtime: sshd on job `node`, the TrainJob's command on
# `launcher` (the trainer step), which also counts as a node.
DEEPSPEED = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: deepspeed-distributed}
spec:
  mlPolicy:
    numNodes: 1
    mpi:
      numProcPerNode: 1
      mpiImplementation: OpenMPI
      sshAuthMountPath: /home/mpiuser/.ssh
      runLauncherAsNode: true
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: deepspeed-runtime
                      command: [/usr/sbin/sshd]
                      args: [-De, -f, /home/mpiuser/.sshd_config]
        - name: launcher
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: deepspeed-runtime
"""

# A plain MPI runtime: the launcher only launches; `node` runs the ranks.
PLAIN = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: mpi-distributed}
spec:
  mlPolicy:
    numNodes: 1
    mpi: {numProcPerNode: 1}
  template:
    spec:
      replicatedJobs:
        - name: launcher
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: mpi-runtime
        - name: node
          template:
            spec:
              template:
                spec:
                  containers:
                    - name: node
                      image: mpi-runtime
                      command: [/usr/sbin/sshd, -De]
"""

TORCH = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: torch-distributed}
spec:
  mlPolicy: {numNodes: 1, torch: {}}
  template:
    spec:
      replicatedJobs:
        - name: node
          template:
            metadata:
              labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
            spec:
              template:
                spec:
                  containers: [{name: node, image: torch}]
"""


def runtime(text: str, **mpi: Any) -> ClusterTrainingRuntime:
    data = yaml.safe_load(text)
    if mpi:
        data["spec"]["mlPolicy"]["mpi"].update(mpi)
    return ClusterTrainingRuntime.from_wire(data)


def trainjob(name: str = "alpha", trainer: dict[str, Any] | None = None, **spec: Any) -> TrainJob:
    return b.trainjob_model(
        name,
        namespace="team",
        uid="uid-1",
        runtime="rt",
        runtime_kind="ClusterTrainingRuntime",
        trainer=trainer,
        **spec,
    )


def build(
    job: TrainJob,
    rt: ClusterTrainingRuntime,
    observed: Observed | None = None,
    ctx: BuildContext = CTX,
) -> dict[tuple[str, str], dict[str, Any]]:
    objects = render(job, rt, observed=observed, ctx=ctx, framework=FRAMEWORK)
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def jobs(objects: dict[tuple[str, str], dict[str, Any]], name: str) -> dict[str, Any]:
    jobset = objects[("JobSet", name)]
    return {j["name"]: j for j in jobset["spec"]["replicatedJobs"]}


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["template"]["spec"]["template"]["spec"]
    return spec


def node_container(job: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod_spec(job)["containers"] if c["name"] == "node")


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def hostfile_of(objects: dict[tuple[str, str], dict[str, Any]], name: str = "alpha") -> str:
    data: str = objects[("ConfigMap", f"{name}-mpi-hostfile")]["data"]["hostfile"]
    return data


# --- Counts and the hostfile ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_nodes", "node_pods", "hostfile"),
    [
        # numNodes 1 still gets one sshd worker: upstream's max(numNodes - 1, 1).
        (1, 1, "alpha-node-0-0.alpha slots=1\nalpha-launcher-0-0.alpha slots=1\n"),
        (2, 1, "alpha-node-0-0.alpha slots=1\nalpha-launcher-0-0.alpha slots=1\n"),
        (
            4,
            3,
            "alpha-node-0-0.alpha slots=1\nalpha-node-0-1.alpha slots=1\n"
            "alpha-node-0-2.alpha slots=1\nalpha-launcher-0-0.alpha slots=1\n",
        ),
    ],
)
def test_deepspeed_run_launcher_as_node(num_nodes: int, node_pods: int, hostfile: str) -> None:
    objects = build(trainjob(trainer={"numNodes": num_nodes}), runtime(DEEPSPEED))
    rjobs = jobs(objects, "alpha")
    assert rjobs["node"]["template"]["spec"]["parallelism"] == node_pods
    assert rjobs["node"]["template"]["spec"]["completions"] == node_pods
    # The launcher keeps the runtime's count (mlPolicy.numNodes: 1).
    assert rjobs["launcher"]["template"]["spec"]["parallelism"] == 1
    assert hostfile_of(objects) == hostfile


def test_deepspeed_without_num_nodes_keeps_template_counts() -> None:
    objects = build(trainjob(trainer={"image": "mine"}), runtime(DEEPSPEED))
    rjobs = jobs(objects, "alpha")
    assert rjobs["node"]["template"]["spec"]["parallelism"] == 1
    assert node_container(rjobs["launcher"])["image"] == "mine"
    assert node_container(rjobs["node"])["image"] == "deepspeed-runtime"


def test_plain_mpi_worked_example() -> None:
    """Spec 2.7: numNodes 2, slots 8, no launcher-as-node."""
    objects = build(trainjob(trainer={"numNodes": 2, "numProcPerNode": 8}), runtime(PLAIN))
    assert hostfile_of(objects) == "alpha-node-0-0.alpha slots=8\nalpha-node-0-1.alpha slots=8\n"
    rjobs = jobs(objects, "alpha")
    assert rjobs["node"]["template"]["spec"]["parallelism"] == 2
    assert rjobs["launcher"]["template"]["spec"]["parallelism"] == 1


def test_hostfile_honours_network_subdomain() -> None:
    rt = yaml.safe_load(PLAIN)
    rt["spec"]["template"]["spec"]["network"] = {"subdomain": "mpi-net"}
    objects = build(trainjob(trainer={"numNodes": 2}), ClusterTrainingRuntime.from_wire(rt))
    assert hostfile_of(objects) == (
        "alpha-node-0-0.mpi-net slots=1\nalpha-node-0-1.mpi-net slots=1\n"
    )


def test_hostfile_lists_every_replica_of_the_node_job() -> None:
    rt = yaml.safe_load(PLAIN)
    rt["spec"]["template"]["spec"]["replicatedJobs"][1]["replicas"] = 2
    objects = build(trainjob(trainer={"numNodes": 1}), ClusterTrainingRuntime.from_wire(rt))
    assert hostfile_of(objects) == "alpha-node-0-0.alpha slots=1\nalpha-node-1-0.alpha slots=1\n"


# --- Slots --------------------------------------------------------------------------------------


def with_node_resources(text: str, resources: dict[str, Any]) -> ClusterTrainingRuntime:
    rt = yaml.safe_load(text)
    for job in rt["spec"]["template"]["spec"]["replicatedJobs"]:
        for ctr in job["template"]["spec"]["template"]["spec"]["containers"]:
            ctr["resources"] = resources
    return ClusterTrainingRuntime.from_wire(rt)


def only_launcher_resources(text: str, resources: dict[str, Any]) -> ClusterTrainingRuntime:
    rt = yaml.safe_load(text)
    for job in rt["spec"]["template"]["spec"]["replicatedJobs"]:
        if job["name"] == "launcher":
            job["template"]["spec"]["template"]["spec"]["containers"][0]["resources"] = resources
    return ClusterTrainingRuntime.from_wire(rt)


GPU2 = {"limits": {"nvidia.com/gpu": 2}}


@pytest.mark.parametrize(
    ("case", "rt", "trainer", "expected"),
    [
        ("from numProcPerNode", runtime(PLAIN), {"numProcPerNode": 3}, 3),
        (
            "numProcPerNode wins over GPUs",
            with_node_resources(PLAIN, GPU2),
            {"numProcPerNode": 5},
            5,
        ),
        ("from runtime GPUs", with_node_resources(PLAIN, GPU2), {}, 2),
        (
            "from TrainJob resourcesPerNode GPUs",
            with_node_resources(PLAIN, GPU2),
            {"resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}},
            4,
        ),
        (
            "resourcesPerNode replaces runtime resources for counting",
            with_node_resources(PLAIN, GPU2),
            {"resourcesPerNode": {"requests": {"cpu": "4"}}},
            1,
        ),
        ("one GPU keeps runtime value", with_node_resources(PLAIN, {"limits": {"gpu": 1}}), {}, 1),
        ("from runtime value", runtime(PLAIN, numProcPerNode=6), {}, 6),
        (
            "runtime value other than 1 ignores GPUs",
            with_node_resources(PLAIN.replace("numProcPerNode: 1", "numProcPerNode: 3"), GPU2),
            {},
            3,
        ),
        ("deepspeed GPUs from job node", with_node_resources(DEEPSPEED, GPU2), {}, 2),
        (
            "GPUs from the first job whose node container declares resources",
            only_launcher_resources(DEEPSPEED, {"limits": {"nvidia.com/gpu": 8}}),
            {},
            8,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_slots(
    case: str, rt: ClusterTrainingRuntime, trainer: dict[str, Any], expected: int
) -> None:
    objects = build(trainjob(trainer={"numNodes": 1, **trainer}), rt)
    launcher = node_container(jobs(objects, "alpha")["launcher"])
    assert env_of(launcher)["OMPI_MCA_orte_set_default_slots"] == str(expected)
    assert f"slots={expected}\n" in hostfile_of(objects)


def test_non_integer_num_proc_per_node_is_rejected() -> None:
    with pytest.raises(BuildError, match=r"spec\.trainer\.numProcPerNode.*integer"):
        build(trainjob(trainer={"numProcPerNode": "auto"}), runtime(PLAIN))


# --- Volumes, mounts and env --------------------------------------------------------------------

SSH_VOLUME = {
    "name": "mpi-ssh-auth",
    "secret": {
        "secretName": "alpha-mpi-ssh-auth",
        "defaultMode": 256,
        "items": [
            {"key": "ssh-privatekey", "path": "id_rsa", "mode": 416},
            {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 420},
            {"key": "ssh-publickey", "path": "authorized_keys", "mode": 420},
        ],
    },
}
HOSTFILE_VOLUME = {
    "name": "mpi-hostfile",
    "configMap": {
        "name": "alpha-mpi-hostfile",
        "items": [{"key": "hostfile", "path": "hostfile", "mode": 292}],
    },
}


def test_volumes_mounts_and_modes() -> None:
    objects = build(trainjob(trainer={"numNodes": 2}), runtime(DEEPSPEED))
    rjobs = jobs(objects, "alpha")
    assert pod_spec(rjobs["node"])["volumes"] == [SSH_VOLUME]
    assert pod_spec(rjobs["launcher"])["volumes"] == [SSH_VOLUME, HOSTFILE_VOLUME]
    assert node_container(rjobs["node"])["volumeMounts"] == [
        {"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"}
    ]
    assert node_container(rjobs["launcher"])["volumeMounts"] == [
        {"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"},
        {"name": "mpi-hostfile", "mountPath": "/etc/mpi"},
    ]
    # sshd's pods get no launcher env.
    assert "env" not in node_container(rjobs["node"])


def test_default_ssh_mount_path_is_root() -> None:
    rt = yaml.safe_load(PLAIN)
    objects = build(trainjob(trainer={"numNodes": 1}), ClusterTrainingRuntime.from_wire(rt))
    mounts = node_container(jobs(objects, "alpha")["node"])["volumeMounts"]
    assert mounts == [{"name": "mpi-ssh-auth", "mountPath": "/root/.ssh"}]


def test_launcher_env_is_injected_without_spec_trainer() -> None:
    """Upstream injects the launcher env unconditionally (unlike PET_*/JAX_*/DMLC_*)."""
    objects = build(trainjob(), runtime(PLAIN, numProcPerNode=2))
    launcher = node_container(jobs(objects, "alpha")["launcher"])
    assert launcher["env"] == [
        {"name": "OMPI_MCA_orte_default_hostfile", "value": "/etc/mpi/hostfile"},
        {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
        {"name": "OMPI_MCA_orte_set_default_slots", "value": "2"},
        {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
        # Beyond upstream: OpenMPI 5's launcher (PRRTE) reads only these names.
        {"name": "PRTE_MCA_prte_default_hostfile", "value": "/etc/mpi/hostfile"},
        {"name": "PRTE_MCA_prte_set_default_slots", "value": "2"},
        {"name": "PRTE_MCA_plm_ssh_args", "value": "-o ConnectionAttempts=10"},
    ]


def test_trainjob_env_follows_launcher_env() -> None:
    # As upstream's controller writes it (side by side, docs/side-by-side.md): the TrainJob's
    # env is upserted when the JobSet is built, after the MPI plugin's.
    job = trainjob(trainer={"env": [{"name": "A", "value": "1"}]})
    objects = build(job, runtime(PLAIN))
    names = [e["name"] for e in node_container(jobs(objects, "alpha")["launcher"])["env"]]
    assert names[-1] == "A"
    assert names[:-1] == [
        "OMPI_MCA_orte_default_hostfile",
        "OMPI_MCA_orte_keep_fqdn_hostnames",
        "OMPI_MCA_orte_set_default_slots",
        "OMPI_MCA_plm_rsh_args",
        "PRTE_MCA_prte_default_hostfile",
        "PRTE_MCA_prte_set_default_slots",
        "PRTE_MCA_plm_ssh_args",
    ]


# --- Implementations (kubeflow/trainer#3712) -----------------------------------------------------


@pytest.mark.parametrize(
    ("impl", "hostfile", "env"),
    [
        (
            "OpenMPI",
            "alpha-node-0-0.alpha slots=4\nalpha-node-0-1.alpha slots=4\n",
            {
                "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                "OMPI_MCA_orte_set_default_slots": "4",
                "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                "PRTE_MCA_prte_default_hostfile": "/etc/mpi/hostfile",
                "PRTE_MCA_prte_set_default_slots": "4",
                "PRTE_MCA_plm_ssh_args": "-o ConnectionAttempts=10",
            },
        ),
        (
            "",
            "alpha-node-0-0.alpha slots=4\nalpha-node-0-1.alpha slots=4\n",
            {
                "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                "OMPI_MCA_orte_set_default_slots": "4",
                "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                "PRTE_MCA_prte_default_hostfile": "/etc/mpi/hostfile",
                "PRTE_MCA_prte_set_default_slots": "4",
                "PRTE_MCA_plm_ssh_args": "-o ConnectionAttempts=10",
            },
        ),
        (
            "MPICH",
            "alpha-node-0-0.alpha:4\nalpha-node-0-1.alpha:4\n",
            {
                "HYDRA_HOST_FILE": "/etc/mpi/hostfile",
                "HYDRA_LAUNCHER_EXTRA_ARGS": "-o ConnectionAttempts=10",
                "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10",
                "HYDRA_CONFIG_FILE": "/etc/mpi/hydra.conf",
            },
        ),
        (
            "Intel",
            "alpha-node-0-0.alpha:4\nalpha-node-0-1.alpha:4\n",
            {
                "I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile",
                "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
                "I_MPI_PERHOST": "4",
            },
        ),
    ],
)
def test_implementations(impl: str, hostfile: str, env: dict[str, str]) -> None:
    rt = runtime(PLAIN, mpiImplementation=impl, numProcPerNode=4)
    objects = build(trainjob(trainer={"numNodes": 2}), rt)
    assert hostfile_of(objects) == hostfile
    assert env_of(node_container(jobs(objects, "alpha")["launcher"])) == env


def test_launcher_as_node_hostfile_for_mpich() -> None:
    rt = runtime(DEEPSPEED, mpiImplementation="MPICH", numProcPerNode=2)
    objects = build(trainjob(trainer={"numNodes": 3}), rt)
    assert hostfile_of(objects) == (
        "alpha-node-0-0.alpha:2\nalpha-node-0-1.alpha:2\nalpha-launcher-0-0.alpha:2\n"
    )
    # The launcher's -localhost is its own hostfile line, so Hydra starts its ranks there
    # without ssh.
    data = objects[("ConfigMap", "alpha-mpi-hostfile")]["data"]
    assert data["hydra.conf"] == "-localhost alpha-launcher-0-0.alpha\n"


def test_mpich_names_the_launcher_to_hydra_by_its_subdomain_name() -> None:
    """Hydra's proxies connect back to the name ``-localhost`` gives; the launcher's short
    hostname does not resolve from the node pods, ``<pod>.<subdomain>`` does."""
    rt = runtime(PLAIN, mpiImplementation="MPICH", numProcPerNode=2)
    objects = build(trainjob(trainer={"numNodes": 2}), rt)
    data = objects[("ConfigMap", "alpha-mpi-hostfile")]["data"]
    assert data == {
        "hostfile": "alpha-node-0-0.alpha:2\nalpha-node-0-1.alpha:2\n",
        "hydra.conf": "-localhost alpha-launcher-0-0.alpha\n",
    }
    launcher = jobs(objects, "alpha")["launcher"]
    volume = next(v for v in pod_spec(launcher)["volumes"] if v["name"] == "mpi-hostfile")
    assert volume["configMap"]["items"] == [
        {"key": "hostfile", "path": "hostfile", "mode": 0o444},
        {"key": "hydra.conf", "path": "hydra.conf", "mode": 0o444},
    ]
    mounts = {m["name"]: m["mountPath"] for m in node_container(launcher)["volumeMounts"]}
    assert mounts["mpi-hostfile"] == "/etc/mpi"


def test_openmpi_gets_no_hydra_options_file() -> None:
    objects = build(trainjob(trainer={"numNodes": 2}), runtime(PLAIN))
    assert list(objects[("ConfigMap", "alpha-mpi-hostfile")]["data"]) == ["hostfile"]
    launcher = jobs(objects, "alpha")["launcher"]
    volume = next(v for v in pod_spec(launcher)["volumes"] if v["name"] == "mpi-hostfile")
    assert [item["key"] for item in volume["configMap"]["items"]] == ["hostfile"]


def test_unsupported_implementation_is_rejected() -> None:
    rt = runtime(PLAIN, mpiImplementation="LAM")
    with pytest.raises(BuildError) as err:
        build(trainjob(), rt)
    assert str(err.value) == (
        "spec.mlPolicy.mpi.mpiImplementation: "
        'MPI implementation "LAM" is not supported; supported: OpenMPI, MPICH, Intel'
    )


# --- The SSH Secret -----------------------------------------------------------------------------

OWNER = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "name": "alpha",
    "uid": "uid-1",
    "controller": True,
    "blockOwnerDeletion": True,
}


def test_secret_is_created_with_fresh_keys() -> None:
    objects = build(trainjob(), runtime(PLAIN))
    secret = objects[("Secret", "alpha-mpi-ssh-auth")]
    assert secret == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "alpha-mpi-ssh-auth",
            "namespace": "team",
            "labels": {"trainer.kubeflow.org/trainjob-name": "alpha"},
            "ownerReferences": [OWNER],
        },
        "type": "kubernetes.io/ssh-auth",
        "immutable": True,
        "data": {
            "ssh-privatekey": base64.b64encode(FAKE_KEYS.private_pem).decode(),
            "ssh-publickey": base64.b64encode(FAKE_KEYS.public_authorized_key).decode(),
        },
    }
    hostfile = objects[("ConfigMap", "alpha-mpi-hostfile")]
    assert hostfile["metadata"]["ownerReferences"] == [OWNER]
    assert hostfile["metadata"]["namespace"] == "team"


def test_side_objects_come_before_the_jobset() -> None:
    objects = render(trainjob(), runtime(PLAIN), ctx=CTX, framework=FRAMEWORK)
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert kinds.index(("Secret", "alpha-mpi-ssh-auth")) < kinds.index(("JobSet", "alpha"))
    assert kinds.index(("ConfigMap", "alpha-mpi-hostfile")) < kinds.index(("JobSet", "alpha"))


def test_existing_secret_is_reused_never_rotated() -> None:
    observed = Observed(
        secrets={"alpha-mpi-ssh-auth": {"metadata": {"name": "alpha-mpi-ssh-auth"}}}
    )
    objects = build(
        trainjob(trainer={"numNodes": 2}),
        runtime(PLAIN),
        observed=observed,
        ctx=BuildContext(ssh_keygen=failing_keygen),
    )
    assert ("Secret", "alpha-mpi-ssh-auth") not in objects
    # The hostfile is rebuilt on every build.
    assert hostfile_of(objects) == "alpha-node-0-0.alpha slots=1\nalpha-node-0-1.alpha slots=1\n"


def test_missing_keygen_is_a_build_error() -> None:
    with pytest.raises(BuildError, match="MPI needs an SSH key generator"):
        build(trainjob(), runtime(PLAIN), ctx=BuildContext())


def test_non_mpi_runtime_is_untouched() -> None:
    objects = render(
        trainjob(),
        runtime(TORCH),
        ctx=BuildContext(ssh_keygen=failing_keygen),
        framework=FRAMEWORK,
    )
    assert not [o for o in objects if o["metadata"]["name"].startswith("alpha-mpi")]
    rjobs = jobs({(o["kind"], o["metadata"]["name"]): o for o in objects}, "alpha")
    assert "volumes" not in pod_spec(rjobs["node"])


# --- The real key generator ---------------------------------------------------------------------


def test_real_keygen_makes_a_p521_pair() -> None:
    pair = generate_ssh_keypair()
    assert pair.private_pem.startswith(b"-----BEGIN EC PRIVATE KEY-----\n")
    assert pair.private_pem.endswith(b"-----END EC PRIVATE KEY-----\n")
    key = load_pem_private_key(pair.private_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.curve.name == "secp521r1"

    assert pair.public_authorized_key.startswith(b"ecdsa-sha2-nistp521 ")
    assert pair.public_authorized_key.endswith(b"\n")
    assert pair.public_authorized_key.count(b"\n") == 1
    public = load_ssh_public_key(pair.public_authorized_key.strip())
    assert isinstance(public, ec.EllipticCurvePublicKey)
    assert public.public_numbers() == key.public_key().public_numbers()

    assert generate_ssh_keypair().private_pem != pair.private_pem


# --- Builds that only need the spec (admission's name check) ------------------------------------


def test_a_spec_only_build_returns_no_objects_but_the_same_jobset_spec() -> None:
    job, rt = trainjob(trainer={"numNodes": 3}), runtime(DEEPSPEED)
    full = jobs(build(job, rt), "alpha")
    info = new_info(job, rt)
    spec_only = BuildContext(ssh_keygen=failing_keygen, objects=False)
    assert FRAMEWORK.run(info, spec_only) == []  # no Secret, hostfile or JobSet
    assert info.spec is not None
    assert {j.name: j.to_wire() for j in info.spec.replicated_jobs or []} == full


def test_a_spec_only_build_fails_as_the_full_build_does() -> None:
    info = new_info(trainjob(trainer={"numProcPerNode": "auto"}), runtime(PLAIN))
    with pytest.raises(BuildError, match=r"spec\.trainer\.numProcPerNode.*integer"):
        FRAMEWORK.run(info, BuildContext(ssh_keygen=fake_keygen, objects=False))


# --- The implementations the CRD admits ---------------------------------------------------------


@pytest.mark.parametrize("impl", ["OpenMPI", "MPICH", ""])
def test_the_crd_admits_openmpi_and_mpich(impl: str) -> None:
    data = yaml.safe_load(PLAIN)
    data["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = impl
    assert check_object(data).ok


def test_the_crd_refuses_intel_naming_the_field_and_the_values() -> None:
    data = yaml.safe_load(PLAIN)
    data["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "Intel"
    errors = [str(e) for e in check_object(data).errors]
    assert errors[0] == (
        'spec.mlPolicy.mpi.mpiImplementation: Unsupported value: "Intel": '
        'supported values: "OpenMPI", "MPICH", ""'
    )
