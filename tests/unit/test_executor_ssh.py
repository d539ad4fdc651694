"""SSH between the pods of a local JobSet: which JobSets get a port per pod hostname and how a
pod finds its own (trainer.local.executor.policy.sshports), the sshd and ssh configs the
executor writes (trainer.local.executor.sandbox.ssh), and the local file modes of fsGroup
volumes (trainer.local.executor.kubelet.policy.volumes.local_mode)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from trainer.local.executor.kubelet.policy.rewrites import parse_ports
from trainer.local.executor.kubelet.policy.volumes import local_mode, plan_volumes
from trainer.local.executor.policy import sshports
from trainer.local.executor.policy.podfields import LOCAL_PORTS, Node, Sources
from trainer.local.executor.sandbox import ssh


def sshd_container(**extra: Any) -> dict[str, Any]:
    return {
        "name": "node",
        "command": ["/usr/sbin/sshd"],
        "args": ["-De", "-f", "/home/mpiuser/.sshd_config"],
        **extra,
    }


def jobset(node: dict[str, Any], *, parallelism: int = 2) -> dict[str, Any]:
    def rjob(name: str, container: dict[str, Any], pods: int) -> dict[str, Any]:
        template = {"spec": {"containers": [container]}}
        spec = {"parallelism": pods, "completions": pods, "template": template}
        return {"name": name, "replicas": 1, "template": {"spec": spec}}

    launcher = {"name": "node", "command": ["mpirun", "hostname"]}
    return {
        "metadata": {"name": "job", "namespace": "team"},
        "spec": {
            "replicatedJobs": [rjob("launcher", launcher, 1), rjob("node", node, parallelism)]
        },
    }


def test_every_pod_hostname_gets_a_port_when_a_job_runs_sshd() -> None:
    probe = {"tcpSocket": {"port": 2222}}
    found = sshports.ssh_hosts(jobset(sshd_container(readinessProbe=probe)))
    assert found == (2222, ["job-launcher-0-0", "job-node-0-0", "job-node-0-1"])


@pytest.mark.parametrize(
    ("container", "port"),
    [
        (sshd_container(ports=[{"containerPort": 2022}]), 2022),
        (sshd_container(), 22),
        ({"name": "node", "args": ["sshd", "-D"]}, 22),  # no command: args run
        (sshd_container(readinessProbe={"tcpSocket": {"port": "2222"}}), 2222),
    ],
)
def test_sshd_port_comes_from_probe_then_ports_then_22(
    container: dict[str, Any], port: int
) -> None:
    found = sshports.ssh_hosts(jobset(container))
    assert found is not None and found[0] == port


def test_a_jobset_without_sshd_gets_no_ssh_ports() -> None:
    assert sshports.ssh_hosts(jobset({"name": "node", "command": ["torchrun", "train.py"]})) is None


def pod(hostname: str, ssh_map: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
    annotations = {LOCAL_PORTS: json.dumps({"29500": 21000})}
    if ssh_map is not None:
        annotations[sshports.LOCAL_SSH] = json.dumps(ssh_map)
    return {
        "metadata": {"name": f"{hostname}-abcde", "namespace": "team", "annotations": annotations},
        "spec": {"hostname": hostname, "subdomain": "job", **spec},
    }


def test_a_pod_maps_sshds_container_port_to_its_own_host_port() -> None:
    mapping = {"port": 2222, "hosts": {"job-node-0-0": 21001, "job-node-0-1": 21002}}
    assert parse_ports(pod("job-node-0-1", mapping)) == {29500: 21000, 2222: 21002}
    assert parse_ports(pod("job-node-0-0", mapping)) == {29500: 21000, 2222: 21001}
    assert parse_ports(pod("job-node-0-0", {"port": "x"})) == {29500: 21000}  # malformed
    assert parse_ports(pod("job-node-0-0", None)) == {29500: 21000}


def test_sshd_argv_replaces_the_images_config_file() -> None:
    config = Path("/state/ssh/sshd_config")
    assert ssh.sshd_argv(["/usr/sbin/sshd", "-De", "-f", "/home/u/.sshd_config"], config) == [
        "/usr/sbin/sshd",
        "-f",
        str(config),
        "-De",
    ]
    assert ssh.sshd_argv(["sshd", "-f/etc/x", "-D"], config) == ["sshd", "-f", str(config), "-D"]
    assert ssh.sshd_argv(["sshd", "-D"], config) == ["sshd", "-f", str(config), "-D"]


def test_ssh_config_maps_every_dns_form_of_a_pod_to_its_port() -> None:
    text = ssh.ssh_config({"job-node-0-1": 21002}, "job", "team", "/v/mpi-ssh-auth/id_rsa")
    assert (
        "Host job-node-0-1 job-node-0-1.job job-node-0-1.job.team job-node-0-1.job.team.svc "
        "job-node-0-1.job.team.svc.cluster.local\n  HostName 127.0.0.1\n  Port 21002\n"
    ) in text
    assert "  IdentityFile /v/mpi-ssh-auth/id_rsa\n  IdentitiesOnly yes\n" in text
    assert "StrictHostKeyChecking no" in text


def test_sshd_config_is_strict_and_passes_the_tool_environment(tmp_path: Path) -> None:
    env = {"PATH": "/venv/bin:/usr/bin", "SECRET": "x", "PYTHONPATH": "/a b"}
    text = ssh.sshd_config(21001, tmp_path / "k", "/v/authorized_keys", env, tmp_path / "h")
    lines = text.splitlines()
    assert "Port 21001" in lines and "ListenAddress 127.0.0.1" in lines
    assert "StrictModes yes" in lines and "PasswordAuthentication no" in lines
    assert "AuthorizedKeysFile /v/authorized_keys" in lines
    setenv = next(line for line in lines if line.startswith("SetEnv "))
    assert '"PATH=/venv/bin:/usr/bin"' in setenv and '"PYTHONPATH=/a b"' in setenv
    assert f'"HOME={tmp_path / "h"}"' in setenv
    assert "SECRET" not in setenv  # only the tool environment, not every variable


def test_sshd_sessions_make_prrte_daemons_fork_ranks_on_their_main_thread(tmp_path: Path) -> None:
    """The prted daemons mpirun starts through sshd get no odls worker threads (the race of
    openpmix/prrte#2713, docs/local-plane.md); a value of the executor's environment wins."""
    text = ssh.sshd_config(21001, tmp_path / "k", "/v/a", {"PATH": "/bin"}, tmp_path / "h")
    setenv = next(line for line in text.splitlines() if line.startswith("SetEnv "))
    assert '"PRTE_MCA_odls_base_max_threads=0"' in setenv
    env = {"PATH": "/bin", "PRTE_MCA_odls_base_max_threads": "4"}
    text = ssh.sshd_config(21001, tmp_path / "k", "/v/a", env, tmp_path / "h")
    setenv = next(line for line in text.splitlines() if line.startswith("SetEnv "))
    assert '"PRTE_MCA_odls_base_max_threads=4"' in setenv
    assert "max_threads=0" not in setenv


def test_strict_modes_check_stops_at_a_world_writable_directory(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    inner = shared / "state"
    inner.mkdir(mode=0o700)
    assert ssh.unsafe_dir(inner / "authorized_keys") == shared.resolve()


def test_sshd_setup_refuses_authorized_keys_below_tmp(tmp_path: Path) -> None:
    if ssh.unsafe_dir(tmp_path / "x") is None:
        pytest.skip(f"{tmp_path} has no group/world-writable parent on this machine")
    mapping = {"port": 2222, "hosts": {"job-node-0-0": 21001}}
    with pytest.raises(ssh.SSHSetupError, match="StrictModes refuses files under"):
        ssh.sshd_setup(
            ssh.Files(tmp_path / "ssh"),
            pod("job-node-0-0", mapping),
            "job-node-0-0",
            ["/usr/sbin/sshd", "-De"],
            str(tmp_path),
            {},
        )


def test_private_parent_is_safe_for_strict_modes() -> None:
    parent = ssh.private_parent()
    assert parent is not None, "no StrictModes-safe place for trainer run's state here"
    assert ssh.unsafe_dir(Path(parent) / "x") is None
    assert stat.S_IMODE(os.stat(parent).st_mode) & 0o022 == 0


@pytest.mark.parametrize(
    ("mode", "fs_group", "local"),
    [(0o640, 1000, 0o600), (0o644, 1000, 0o604), (0o400, 1000, 0o400), (0o640, None, 0o640)],
)
def test_fs_group_bits_are_dropped_locally(mode: int, fs_group: int | None, local: int) -> None:
    assert local_mode(mode, fs_group) == local


def test_secret_volume_of_an_fs_group_pod_is_owner_only(tmp_path: Path) -> None:
    secret = {
        "metadata": {"name": "job-mpi-ssh-auth"},
        "type": ssh.SSH_AUTH_TYPE,
        "data": {"ssh-privatekey": "a2V5", "ssh-publickey": "cHVi"},
    }
    items = [
        {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
        {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
    ]
    volume = {"name": "mpi-ssh-auth", "secret": {"secretName": "job-mpi-ssh-auth", "items": items}}
    node = Node(cpus=1, memory=1, ephemeral_storage=1)
    sources = Sources(secrets={"job-mpi-ssh-auth": secret})
    grouped = pod("job-node-0-0", None, volumes=[volume], securityContext={"fsGroup": 1000})
    plain = pod("job-node-0-0", None, volumes=[volume])
    modes = {f.path: f.mode for f in plan_volumes(grouped, sources, tmp_path, node)[0].files}
    assert modes == {"id_rsa": 0o600, "authorized_keys": 0o604}
    modes = {f.path: f.mode for f in plan_volumes(plain, sources, tmp_path, node)[0].files}
    assert modes == {"id_rsa": 0o640, "authorized_keys": 0o644}
