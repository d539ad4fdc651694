"""The Flux plugin and Z85 (ZeroMQ RFC 32), as a user sees them in the
rendered JobSet, ConfigMap ``<job>-flux-entrypoint`` and Secret ``<job>-flux-curve``."""

from __future__ import annotations

import base64
import hashlib
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainJob
from trainer.machinery.errors import INVALID
from trainer.plugins.flux import DEFAULT_VIEW_IMAGE, FluxPlugin, curve_certificate, validate
from trainer.plugins.jobset import JobSetPlugin
from trainer.plugins.registry import render
from trainer.runtime import z85
from trainer.runtime.assemble import new_info
from trainer.runtime.framework import Framework
from trainer.runtime.info import BuildError

FRAMEWORK = Framework([FluxPlugin(), JobSetPlugin()])

RUNTIME = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata: {name: flux-runtime}
spec:
  mlPolicy:
    numNodes: 1
    flux: {numProcPerNode: 2}
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
                  containers:
                    - name: node
                      image: ubuntu:22.04
                      command: [python3, train.py]
                      args: [--epochs, "1"]
"""

TRAINJOB = """
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: alpha, namespace: team, uid: 0b5e2a1c-7d4f-4e8a-9c3b-1f2e3d4c5b6a}
spec:
  runtimeRef: {name: flux-runtime}
"""


def runtime(text: str = RUNTIME) -> ClusterTrainingRuntime:
    return ClusterTrainingRuntime.from_wire(yaml.safe_load(text))


def trainjob(trainer: dict[str, Any] | None = None, **meta: str) -> TrainJob:
    data = yaml.safe_load(TRAINJOB)
    data["metadata"].update(meta)
    if trainer is not None:
        data["spec"]["trainer"] = trainer
    return TrainJob.from_wire(data)


def objects(tj: TrainJob, rt: ClusterTrainingRuntime | None = None) -> dict[str, dict[str, Any]]:
    """Rendered objects by ``<kind>/<name>``."""
    out = render(tj, rt or runtime(), framework=FRAMEWORK)
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in out}


def pod_spec(objs: dict[str, dict[str, Any]], job: str = "node") -> dict[str, Any]:
    jobset = objs["JobSet/alpha"]
    rjob = next(j for j in jobset["spec"]["replicatedJobs"] if j["name"] == job)
    spec: dict[str, Any] = rjob["template"]["spec"]["template"]["spec"]
    return spec


def container(spec: dict[str, Any], name: str, key: str = "containers") -> dict[str, Any]:
    found: dict[str, Any] = next(ctr for ctr in spec.get(key, []) if ctr["name"] == name)
    return found


def scripts(objs: dict[str, dict[str, Any]]) -> dict[str, str]:
    data: dict[str, str] = objs["ConfigMap/alpha-flux-entrypoint"]["data"]
    return data


def cert(objs: dict[str, dict[str, Any]]) -> str:
    return base64.b64decode(objs["Secret/alpha-flux-curve"]["data"]["curve.cert"]).decode()


# --- EnforceMLPolicy: the command ------------------------------------------------------------


@pytest.mark.parametrize(
    ("trainer", "wrapped"),
    [
        (None, "python3 train.py"),
        ({"args": ["--msg", "hello world"]}, "python3 train.py --msg 'hello world'"),
        (
            {"command": ["python3", "-c"], "args": ['print("it\'s ok")']},
            "python3 -c 'print(\"it'\"'\"'s ok\")'",
        ),
        ({"command": ["/bin/sh", "-c", "echo $HOME; ls"]}, "/bin/sh -c 'echo $HOME; ls'"),
    ],
    ids=["runtime", "args-with-space", "args-with-quotes", "shell-metacharacters"],
)
def test_command_is_wrapped_in_the_entrypoint_and_runtime_args_kept(
    trainer: dict[str, Any] | None, wrapped: str
) -> None:
    """As upstream (seen on the test bed): the command line is the command and the TrainJob's
    args; the container keeps the runtime's args, whatever the TrainJob says. Unlike upstream,
    the words are shell-quoted (upstream joins them with spaces)."""
    node = container(pod_spec(objects(trainjob(trainer))), "node")
    assert node["command"] == ["/bin/bash", "/etc/flux-config/entrypoint.sh", wrapped]
    assert node["args"] == ["--epochs", "1"]


def test_runtime_without_args_leaves_none() -> None:
    rt = runtime(RUNTIME.replace('args: [--epochs, "1"]', ""))
    node = container(pod_spec(objects(trainjob({"args": ["--x"]}), rt)), "node")
    assert node["command"][2] == "python3 train.py --x"
    assert "args" not in node


def test_wrapped_command_splits_back_into_the_original_words() -> None:
    args = ["--name", "a b", "--quote", "\"'", "--empty", ""]
    node = container(pod_spec(objects(trainjob({"args": args}))), "node")
    assert shlex.split(node["command"][2]) == ["python3", "train.py", *args]


def test_runtime_without_command_passes_an_empty_command_line() -> None:
    rt = runtime(
        RUNTIME.replace("command: [python3, train.py]", "").replace('args: [--epochs, "1"]', "")
    )
    node = container(pod_spec(objects(trainjob(), rt)), "node")
    assert node["command"] == ["/bin/bash", "/etc/flux-config/entrypoint.sh", ""]


def test_node_count_comes_from_num_nodes_once() -> None:
    objs = objects(trainjob({"numNodes": 3}))
    rjob = objs["JobSet/alpha"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (rjob["parallelism"], rjob["completions"]) == (3, 3)


# --- EnforceMLPolicy: init container, volumes, mounts ----------------------------------------


def test_installer_init_container_volumes_and_mounts() -> None:
    """Upstream's pod template, field for field: volume and mount names, paths, readOnly,
    order, defaultMode, and no ``items`` (every key of the ConfigMap and the Secret)."""
    spec = pod_spec(objects(trainjob()))
    installer = container(spec, "flux-installer", "initContainers")
    assert installer["image"] == DEFAULT_VIEW_IMAGE
    assert installer["command"] == ["/bin/bash", "/etc/flux-config/init.sh"]
    assert installer["volumeMounts"] == [
        {"name": "flux-install", "mountPath": "/mnt/flux"},
        {"name": "alpha-flux-entrypoint", "mountPath": "/etc/flux-config", "readOnly": True},
    ]
    assert spec["volumes"] == [
        {"name": "spack-install", "emptyDir": {}},
        {"name": "flux-install", "emptyDir": {}},
        {
            "name": "alpha-flux-entrypoint",
            "configMap": {"name": "alpha-flux-entrypoint", "defaultMode": 0o755},
        },
        {"name": "shared-memory", "emptyDir": {"medium": "Memory"}},
        {"name": "flux-curve", "secret": {"secretName": "alpha-flux-curve", "defaultMode": 0o400}},
    ]
    node = container(spec, "node")
    assert node["volumeMounts"] == [
        {"name": "flux-install", "mountPath": "/mnt/flux"},
        {"name": "spack-install", "mountPath": "/opt/software"},
        {"name": "alpha-flux-entrypoint", "mountPath": "/etc/flux-config", "readOnly": True},
        {"name": "flux-curve", "mountPath": "/curve", "readOnly": True},
        {"name": "shared-memory", "mountPath": "/dev/shm", "readOnly": True},
    ]


def test_runtime_volumes_and_mounts_are_kept_and_flux_ones_upserted() -> None:
    """A runtime volume of the same name is replaced in place, a mount at the same path too;
    the others stay first."""
    text = RUNTIME.replace(
        '                      args: [--epochs, "1"]\n',
        '                      args: [--epochs, "1"]\n'
        "                      volumeMounts:\n"
        "                        - {name: data, mountPath: /data}\n"
        "                        - {name: shm, mountPath: /dev/shm}\n"
        "                  volumes:\n"
        "                    - {name: data, emptyDir: {}}\n"
        "                    - {name: shared-memory, emptyDir: {sizeLimit: 1Gi}}\n",
    )
    spec = pod_spec(objects(trainjob(), runtime(text)))
    assert [v["name"] for v in spec["volumes"]] == [
        "data",
        "shared-memory",
        "spack-install",
        "flux-install",
        "alpha-flux-entrypoint",
        "flux-curve",
    ]
    assert spec["volumes"][1] == {"name": "shared-memory", "emptyDir": {"medium": "Memory"}}
    mounts = container(spec, "node")["volumeMounts"]
    assert [(m["name"], m["mountPath"]) for m in mounts] == [
        ("data", "/data"),
        ("shared-memory", "/dev/shm"),
        ("flux-install", "/mnt/flux"),
        ("spack-install", "/opt/software"),
        ("alpha-flux-entrypoint", "/etc/flux-config"),
        ("flux-curve", "/curve"),
    ]


def test_runtime_init_containers_are_kept_and_installer_appended() -> None:
    text = RUNTIME.replace(
        "                  containers:\n",
        "                  initContainers:\n"
        "                    - {name: fetch, image: busybox}\n"
        "                  containers:\n",
    )
    spec = pod_spec(objects(trainjob(), runtime(text)))
    assert [c["name"] for c in spec["initContainers"]] == ["fetch", "flux-installer"]


# --- Env overrides ---------------------------------------------------------------------------


def test_flux_view_image_override() -> None:
    image = "ghcr.io/converged-computing/flux-view-rocky:tag-9"
    objs = objects(trainjob({"env": [{"name": "FLUX_VIEW_IMAGE", "value": image}]}))
    assert container(pod_spec(objs), "flux-installer", "initContainers")["image"] == image
    assert image in scripts(objs)["init.sh"]


def test_network_device_and_queue_policy_overrides() -> None:
    env = [
        {"name": "FLUX_NETWORK_DEVICE", "value": "ens5"},
        {"name": "FLUX_QUEUE_POLICY", "value": "easy"},
    ]
    entrypoint = scripts(objects(trainjob({"env": env})))["entrypoint.sh"]
    assert 'default_bind = "tcp://ens5:%p"' in entrypoint
    assert 'queue-policy = "easy"' in entrypoint


def test_defaults_without_env() -> None:
    entrypoint = scripts(objects(trainjob()))["entrypoint.sh"]
    assert 'default_bind = "tcp://eth0:%p"' in entrypoint
    assert 'queue-policy = "fcfs"' in entrypoint


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("FLUX_QUEUE_POLICY", "lifo", "fcfs, easy, hybrid, conservative"),
        ("FLUX_NETWORK_DEVICE", "eth0; rm -rf /", "e.g. 'eth0'"),
        ("FLUX_VIEW_IMAGE", "", "an image"),
    ],
)
def test_unusable_override_is_a_build_error(name: str, value: str, accepted: str) -> None:
    with pytest.raises(BuildError) as err:
        objects(trainjob({"env": [{"name": name, "value": value}]}))
    assert "spec.trainer.env" in str(err.value)
    assert name in str(err.value)
    assert accepted in str(err.value)


# --- Build: the ConfigMap --------------------------------------------------------------------


def broker_toml(entrypoint: str) -> dict[str, Any]:
    """The broker configuration the entrypoint writes (its quoted heredoc), parsed."""
    body = entrypoint.split("<<'BROKER_TOML'\n", 1)[1].split("\nBROKER_TOML\n", 1)[0]
    return tomllib.loads(body)


def test_entrypoint_lists_every_host_and_sizes_flux_run() -> None:
    entrypoint = scripts(objects(trainjob({"numNodes": 3})))["entrypoint.sh"]
    config = broker_toml(entrypoint)
    assert config["bootstrap"]["hosts"] == [
        {"host": f"alpha-node-0-{i}", "connect": f"tcp://alpha-node-0-{i}.alpha:%p"}
        for i in range(3)
    ]
    assert config["bootstrap"]["curve_cert"] == "/mnt/flux/config/etc/curve/curve.cert"
    assert config["bootstrap"]["default_bind"] == "tcp://eth0:%p"
    assert config["sched-fluxion-qmanager"]["queue-policy"] == "fcfs"
    assert "hosts=alpha-node-0-0,alpha-node-0-1,alpha-node-0-2\n" in entrypoint
    assert "main_host=alpha-node-0-0\n" in entrypoint
    # numProcPerNode 2 on 3 nodes.
    assert "flux run -N 3 -n 6 " in entrypoint
    assert "install -m 0400 /curve/curve.cert " in entrypoint


def test_hosts_follow_network_subdomain() -> None:
    text = RUNTIME.replace(
        "    spec:\n      replicatedJobs:",
        "    spec:\n      network: {subdomain: hpc}\n      replicatedJobs:",
    )
    entrypoint = scripts(objects(trainjob({"numNodes": 2}), runtime(text)))["entrypoint.sh"]
    assert 'connect = "tcp://alpha-node-0-1.hpc:%p"' in entrypoint


def test_num_proc_per_node_defaults_to_one() -> None:
    rt = runtime(RUNTIME.replace("flux: {numProcPerNode: 2}", "flux: {}"))
    entrypoint = scripts(objects(trainjob({"numNodes": 4}), rt))["entrypoint.sh"]
    assert "flux run -N 4 -n 4 " in entrypoint


def test_side_objects_are_owned_by_the_trainjob() -> None:
    objs = objects(trainjob())
    for key in ("ConfigMap/alpha-flux-entrypoint", "Secret/alpha-flux-curve"):
        meta = objs[key]["metadata"]
        assert meta["namespace"] == "team"
        (owner,) = meta["ownerReferences"]
        assert owner == {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "name": "alpha",
            "uid": "0b5e2a1c-7d4f-4e8a-9c3b-1f2e3d4c5b6a",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    assert objs["Secret/alpha-flux-curve"]["type"] == "Opaque"
    assert list(objs["Secret/alpha-flux-curve"]["data"]) == ["curve.cert"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash for a syntax check")
def test_scripts_are_valid_bash(tmp_path: Path) -> None:
    for key, text in scripts(objects(trainjob({"numNodes": 3}))).items():
        path = tmp_path / key
        path.write_text(text)
        result = subprocess.run(
            ["bash", "-n", str(path)], check=False, capture_output=True, text=True
        )
        assert result.returncode == 0, (key, result.stderr)


FAKE_FLUX = """#!/bin/bash
# Stands in for Flux: "R encode" prints a resource set, "start" records its arguments.
if [ "$1" = R ]; then echo '{"version": 1}'; exit 0; fi
printf '%s\\n' "$@" > "$FLUX_ARGS"
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to run the scripts")
@pytest.mark.parametrize(
    ("trainer", "words"),
    [
        ({}, ["python3", "train.py", "--epochs", "1"]),
        ({"args": ["--msg", "it's a b"]}, ["python3", "train.py", "--msg", "it's a b"]),
        (
            {"command": ["/bin/sh", "-c", "echo $HOME; ls"]},
            ["/bin/sh", "-c", "echo $HOME; ls", "--epochs", "1"],
        ),
    ],
    ids=["runtime-args", "trainjob-args-replace-them", "trainjob-command"],
)
def test_scripts_run_on_the_mounted_paths(
    tmp_path: Path, trainer: dict[str, Any], words: list[str]
) -> None:
    """Both scripts, run on the pod template's mounts (each absolute path moved under
    ``tmp_path``) with the container's command and args: the installer sees its image's
    ``/opt/view`` and ``/opt/software`` and only ``/mnt/flux``; the node container sees
    ``/mnt/flux``, an empty ``/opt/software`` and the certificate at ``/curve``. The software
    tree reaches the node's ``/opt/software``, the certificate is installed, and the broker
    runs the command line: the command, then the TrainJob's args, else the runtime's."""
    objs = objects(trainjob({"numNodes": 3, **trainer}))
    data = scripts(objs)
    ctr = container(pod_spec(objs), "node")
    image, node, flux_install = tmp_path / "image", tmp_path / "node", tmp_path / "flux-install"
    (image / "view" / "bin").mkdir(parents=True)
    (image / "view" / "bin" / "flux").write_text(FAKE_FLUX)
    (image / "view" / "bin" / "flux").chmod(0o755)
    (image / "software" / "flux-core").mkdir(parents=True)
    (image / "software" / "flux-core" / "lib.so").write_text("flux")
    (node / "software").mkdir(parents=True)
    (node / "curve").mkdir()
    (node / "curve" / "curve.cert").write_text(cert(objs))
    flux_install.mkdir()
    fakes = tmp_path / "bin"
    fakes.mkdir()
    (fakes / "hostname").write_text("#!/bin/sh\necho alpha-node-0-0\n")
    (fakes / "hostname").chmod(0o755)

    def run(key: str, software: Path, args: list[str]) -> None:
        text = (
            data[key]
            .replace("/mnt/flux", str(flux_install))
            .replace("/opt/view", str(image / "view"))
            .replace("/opt/software", str(software))
            .replace(" /curve/", f" {node}/curve/")
        )
        (tmp_path / key).write_text(text)
        env = {"PATH": f"{fakes}:/usr/bin:/bin", "FLUX_ARGS": str(tmp_path / "flux-args")}
        result = subprocess.run(
            ["bash", str(tmp_path / key), *args],
            check=False,
            capture_output=True,
            text=True,
            env=env,
        )
        assert result.returncode == 0, (key, result.stdout, result.stderr)

    run("init.sh", image / "software", [])
    assert ctr["command"][:2] == ["/bin/bash", "/etc/flux-config/entrypoint.sh"]
    run("entrypoint.sh", node / "software", [*ctr["command"][2:], *ctr.get("args", [])])
    assert (node / "software" / "flux-core" / "lib.so").read_text() == "flux"
    state = flux_install / "config"
    assert (state / "etc" / "curve" / "curve.cert").stat().st_mode & 0o777 == 0o400
    args = (tmp_path / "flux-args").read_text().splitlines()
    assert args[0] == "start"
    assert args[-9:-1] == ["flux", "run", "-N", "3", "-n", "6", "/bin/bash", "-c"]
    assert shlex.split(args[-1]) == words


# --- Build: the CURVE certificate -------------------------------------------------------------


def keys(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            found[k.strip()] = v.strip().strip('"')
    return found


def test_curve_cert_format_and_keys() -> None:
    text = cert(objects(trainjob()))
    assert text.startswith("#   ****  Generated by the Kubeflow Trainer  ****\nmetadata\n")
    assert "\ncurve\n" in text
    found = keys(text)
    assert found["name"] == "alpha"
    secret = z85.decode(found["secret-key"])
    assert secret == hashlib.sha256(b"0b5e2a1c-7d4f-4e8a-9c3b-1f2e3d4c5b6a").digest()
    public = X25519PrivateKey.from_private_bytes(secret).public_key()
    assert z85.decode(found["public-key"]) == public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    assert len(found["public-key"]) == len(found["secret-key"]) == 40


def test_curve_cert_is_deterministic_per_uid() -> None:
    first = cert(objects(trainjob()))
    again = cert(objects(trainjob()))
    other = cert(objects(trainjob(uid="a-different-uid")))
    assert first == again
    assert first != other
    assert keys(first)["public-key"] != keys(other)["public-key"]
    assert curve_certificate("alpha", "u") == curve_certificate("alpha", "u")


# --- Inactive without mlPolicy.flux ----------------------------------------------------------


def test_inactive_for_other_policies() -> None:
    rt = runtime(RUNTIME.replace("flux: {numProcPerNode: 2}", "xgboost: {}"))
    objs = objects(trainjob(), rt)
    assert not [k for k in objs if "flux" in k]
    spec = pod_spec(objs)
    assert container(spec, "node")["command"] == ["python3", "train.py"]
    assert "initContainers" not in spec and "volumes" not in spec


def test_runtime_without_a_trainer_node_container_is_a_build_error() -> None:
    rt = runtime(
        RUNTIME.replace(
            "- name: node\n                      image", "- name: main\n                      image"
        )
    )
    with pytest.raises(BuildError, match="container named 'node'"):
        objects(trainjob(), rt)


# --- Validation helper -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "init_name", "errors"),
    [
        ("flux: {}", "flux-installer", 1),
        ("flux: {}", "fetch", 0),
        ("xgboost: {}", "flux-installer", 0),
    ],
)
def test_validate_reserves_the_installer_name(policy: str, init_name: str, errors: int) -> None:
    text = RUNTIME.replace("flux: {numProcPerNode: 2}", policy).replace(
        "                  containers:\n",
        "                  initContainers:\n"
        f"                    - {{name: {init_name}, image: busybox}}\n"
        "                  containers:\n",
    )
    found = validate(new_info(trainjob(), runtime(text)))
    assert len(found) == errors
    for err in found:
        assert (err.path, err.type, err.message) == (
            "spec.trainer.initContainers",
            INVALID,
            "InitContainer 'flux-installer' is reserved",
        )
        assert str(err) == (
            'spec.trainer.initContainers: Invalid value: "flux-installer": '
            "InitContainer 'flux-installer' is reserved"
        )


# --- Z85 ---------------------------------------------------------------------------------------


def test_z85_rfc32_vector() -> None:
    data = bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert z85.encode(data) == "HelloWorld"
    assert z85.decode("HelloWorld") == data


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\x00\x00\x00",
        b"\xff\xff\xff\xff",
        bytes(range(32)),
        hashlib.sha256(b"x").digest(),
    ],
)
def test_z85_round_trip(data: bytes) -> None:
    text = z85.encode(data)
    assert len(text) == len(data) * 5 // 4
    assert z85.decode(text) == data


@pytest.mark.parametrize(
    ("call", "arg", "message"),
    [
        (z85.encode, b"abc", "multiple of 4"),
        (z85.decode, "Hell", "multiple of 5"),
        (z85.decode, "Hello Worl", "not a Z85 character"),
        (z85.decode, "#####", "exceeds 32 bits"),
    ],
)
def test_z85_rejects_bad_input(call: Any, arg: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(arg)
