"""How the local kubelet resolves a pod's containers (trainer.local.executor.kubelet.policy.podenv):
env as a kubelet builds it, $(VAR) expansion, the downward API, and the DNS / port / mount-path
rewrites that map "a pod on a cluster" to "a process on this host"; volume layout and file modes."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.local.executor.kubelet.policy.podenv import final_env, plan_container, resolve_env
from trainer.local.executor.kubelet.policy.rewrites import Rewriter, parse_ports
from trainer.local.executor.kubelet.policy.volumes import plan_volumes, write_volume
from trainer.local.executor.policy.podfields import (
    LOCAL_PORTS,
    ConfigError,
    Node,
    Sources,
    expand_env,
    referenced_objects,
    resource_value,
    service_account,
    token_requests,
)

INDEX_PATH = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
NODE = Node(cpus=8, memory=16 * 1024**3, ephemeral_storage=100 * 1024**3)

POD = yaml.safe_load(
    """
metadata:
  name: train-node-0-0-abcde
  namespace: team
  uid: 1234-uid
  labels:
    jobset.sigs.k8s.io/jobset-name: train
  annotations:
    batch.kubernetes.io/job-completion-index: "1"
    trainer.kubeflow.org/local-ports: '{"29500": 41234}'
spec:
  hostname: train-node-0-1
  subdomain: train
  serviceAccountName: trainer
  containers:
  - name: node
    image: pytorch/pytorch
"""
)


def pod_with(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = json.loads(json.dumps(POD))
    pod["spec"]["containers"] = [{"name": "node", "image": "pytorch/pytorch", **container}]
    pod["spec"].update(spec)
    return pod


def env_of(container: dict[str, Any], sources: Sources | None = None) -> dict[str, str]:
    pod = pod_with(container)
    entries, _ = resolve_env(pod, pod["spec"]["containers"][0], sources or Sources(), NODE)
    return final_env(entries)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


SOURCES = Sources(
    config_maps={
        "settings": {"data": {"LR": "0.1", "MASTER": "train-node-0-0.train:29500", "bad key": "x"}},
        "absent": None,
    },
    secrets={"creds": {"data": {"TOKEN": b64("s3cr3t"), "USER": b64("alice")}}},
)


# --- $(VAR) expansion ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "a"),
        ("x$(A)y$(B)z", "xaybz"),
        ("$(MISSING)", "$(MISSING)"),
        ("$$(A)", "$(A)"),
        ("$$$(A)", "$a"),
        ("$$", "$"),
        ("$", "$"),
        ("$x", "$x"),
        ("$(A", "$(A"),
        ("a$(", "a$("),
        ("$()", "$()"),
        ("100$", "100$"),
    ],
)
def test_expand_follows_kubernetes(text: str, expected: str) -> None:
    assert expand_env(text, {"A": "a", "B": "b"}) == expected


def test_env_values_expand_only_earlier_variables_and_later_names_win() -> None:
    env = env_of(
        {
            "env": [
                {"name": "A", "value": "one"},
                {"name": "B", "value": "$(A)-$(C)"},
                {"name": "C", "value": "three"},
                {"name": "A", "value": "again"},
                {"name": "D", "value": "$(A)"},
            ]
        }
    )
    assert env == {"B": "one-$(C)", "C": "three", "A": "again", "D": "again"}


# --- valueFrom ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field_path", "expected"),
    [
        ("metadata.name", "train-node-0-0-abcde"),
        ("metadata.namespace", "team"),
        ("metadata.uid", "1234-uid"),
        ("metadata.labels['jobset.sigs.k8s.io/jobset-name']", "train"),
        ("metadata.labels['absent']", ""),
        ("metadata.annotations['batch.kubernetes.io/job-completion-index']", "1"),
        ("spec.nodeName", "local"),
        ("spec.serviceAccountName", "trainer"),
        ("status.podIP", "127.0.0.1"),
        ("status.hostIP", "127.0.0.1"),
    ],
)
def test_field_ref(field_path: str, expected: str) -> None:
    env = env_of({"env": [{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": field_path}}}]})
    assert env["V"] == expected


def test_unsupported_field_ref_names_the_supported_paths() -> None:
    with pytest.raises(
        ConfigError, match=r"unsupported fieldPath 'spec\.priority'.*metadata\.name"
    ):
        env_of({"env": [{"name": "V", "valueFrom": {"fieldRef": {"fieldPath": "spec.priority"}}}]})


@pytest.mark.parametrize(
    ("resources", "resource", "divisor", "expected"),
    [
        ({"limits": {"cpu": "500m"}}, "limits.cpu", None, "1"),
        ({"limits": {"cpu": "2500m"}}, "limits.cpu", "1", "3"),
        ({"limits": {"cpu": "500m"}}, "limits.cpu", "1m", "500"),
        ({}, "limits.cpu", None, "8"),
        ({"limits": {"memory": "2Gi"}}, "limits.memory", "1Mi", "2048"),
        ({"limits": {"memory": "1G"}}, "limits.memory", None, "1000000000"),
        ({}, "limits.memory", "1Gi", "16"),
        ({"requests": {"cpu": "250m"}}, "requests.cpu", "1m", "250"),
        ({"limits": {"cpu": "2"}}, "requests.cpu", None, "2"),
        ({}, "requests.memory", None, "0"),
    ],
)
def test_resource_field_ref(
    resources: dict[str, Any], resource: str, divisor: str | None, expected: str
) -> None:
    assert resource_value({"resources": resources}, resource, divisor, NODE) == expected


def test_config_map_and_secret_refs_and_env_from() -> None:
    env = env_of(
        {
            "envFrom": [
                {"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
                {"secretRef": {"name": "creds"}},
                {"configMapRef": {"name": "absent", "optional": True}},
            ],
            "env": [
                {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LR"}}},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "TOKEN"}}},
                {
                    "name": "OPT",
                    "valueFrom": {
                        "secretKeyRef": {"name": "creds", "key": "nope", "optional": True}
                    },
                },
            ],
        },
        SOURCES,
    )
    assert env == {
        "CFG_LR": "0.1",
        "CFG_MASTER": "train-node-0-0.train:29500",
        "TOKEN": "s3cr3t",
        "USER": "alice",
        "LR": "0.1",
    }


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}],
            'configmap "absent" not found',
        ),
        (
            [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}}],
            "couldn't find key k in ConfigMap team/settings",
        ),
        (
            [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "other", "key": "k"}}}],
            'secret "other" not found',
        ),
    ],
)
def test_missing_sources_are_config_errors(env: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        env_of({"env": env}, SOURCES)
    assert err.value.reason == "CreateContainerConfigError"


def test_referenced_objects() -> None:
    pod = pod_with(
        {
            "envFrom": [{"configMapRef": {"name": "a"}}, {"secretRef": {"name": "s1"}}],
            "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s2", "key": "k"}}}],
        },
        volumes=[
            {"name": "v", "configMap": {"name": "b"}},
            {"name": "w", "secret": {"secretName": "s3"}},
            {"name": "p", "projected": {"sources": [{"configMap": {"name": "c"}}]}},
        ],
    )
    assert referenced_objects(pod) == ({"a", "b", "c"}, {"s1", "s2", "s3"})


# --- rewrites -------------------------------------------------------------------------------------

REWRITER_ARGS: dict[str, Any] = {
    "subdomain": "train",
    "namespace": "team",
    "ports": {29500: 41234},
    "mounts": [("/workspace", "/s/ws"), ("/workspace/model", "/s/model")],
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("train-node-0-0.train", "127.0.0.1"),
        ("train-node-0-0.train:29500", "127.0.0.1:41234"),
        ("tcp://train-node-0-0.train.team:29500", "tcp://127.0.0.1:41234"),
        ("train-node-0-0.train.team.svc", "127.0.0.1"),
        ("http://train-node-0-0.train.team.svc.cluster.local:8080/x", "http://127.0.0.1:8080/x"),
        ("train.team.svc", "127.0.0.1"),
        ("a.train,b.train", "127.0.0.1,127.0.0.1"),
        # not pod DNS names of this subdomain
        ("train-node-0-0.other", "train-node-0-0.other"),
        ("x.train.example.com", "x.train.example.com"),
        ("x.trainer", "x.trainer"),
        ("train", "train"),
        # ports
        ("localhost:29500", "localhost:41234"),
        ("--master_port=29500", "--master_port=41234"),
        ("0.0.0.0:295001", "0.0.0.0:295001"),
        ("29500", "29500"),
        ("epochs=29500", "epochs=29500"),
        # mount paths, longest first, only whole path elements
        ("/workspace", "/s/ws"),
        ("/workspace/data/x.csv", "/s/ws/data/x.csv"),
        ("/workspace/model/w.bin", "/s/model/w.bin"),
        ("/workspace/models", "/s/ws/models"),
        ("--out=/workspace/model", "--out=/s/model"),
        ("file:///workspace/a", "file:///s/ws/a"),
        ("/workspace2", "/workspace2"),
        ("/home/me/workspace", "/home/me/workspace"),
        ("./workspace", "./workspace"),
    ],
)
def test_rewriter_text(text: str, expected: str) -> None:
    assert Rewriter(**REWRITER_ARGS).text(text) == expected


def test_rewrites_happen_once() -> None:
    # The mount's host directory lies under another mount path: a single pass never rewrites
    # its own output again.
    r = Rewriter(mounts=[("/data", "/tmp/state/data"), ("/tmp", "/tmp/state/tmp")])
    assert r.text("/data/x /tmp/y") == "/tmp/state/data/x /tmp/state/tmp/y"


def test_argv_ports_through_variables_and_port_options() -> None:
    r = Rewriter(**REWRITER_ARGS)
    env = {"PORT": "29500", "ADDR": "train-node-0-0.train"}
    argv = r.argv(
        ["torchrun", "--master-port", "29500", "--rdzv=$(ADDR):$(PORT)", "--p=$(PORT)", "29500"],
        env,
    )
    assert argv == [
        "torchrun",
        "--master-port",
        "41234",
        "--rdzv=127.0.0.1:41234",
        "--p=41234",
        "29500",
    ]
    assert r.rewrites == {
        "29500": "41234",
        "train-node-0-0.train": "127.0.0.1",
    }


def test_parse_ports() -> None:
    assert parse_ports(POD) == {29500: 41234}
    broken = pod_with({})
    broken["metadata"]["annotations"][LOCAL_PORTS] = "{not json"
    assert parse_ports(broken) == {}


# --- whole containers -----------------------------------------------------------------------------


def test_plan_container_resolves_and_rewrites(tmp_path: Path) -> None:
    container = {
        "command": ["torchrun", "--nnodes=$(PET_NNODES)"],
        "args": ["/workspace/train.py", "--data", "$(DATA)", "$$(NOT_EXPANDED)"],
        "workingDir": "/workspace/run",
        "env": [
            {"name": "PET_NNODES", "value": "2"},
            {"name": "PET_MASTER_ADDR", "value": "train-node-0-0.train"},
            {"name": "PET_MASTER_PORT", "value": "29500"},
            {
                "name": "PET_NODE_RANK",
                "valueFrom": {"fieldRef": {"fieldPath": INDEX_PATH}},
            },
            {"name": "DATA", "value": "/workspace/data"},
            {"name": "URL", "value": "$(PET_MASTER_ADDR):$(PET_MASTER_PORT)"},
            {
                "name": "CFG",
                "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "MASTER"}},
            },
        ],
        "volumeMounts": [
            {"name": "ws", "mountPath": "/workspace"},
            {"name": "cfg", "mountPath": "/etc/app/lr", "subPath": "LR"},
        ],
    }
    pod = pod_with(container)
    plan = plan_container(
        pod,
        pod["spec"]["containers"][0],
        sources=SOURCES,
        volumes={"ws": "/state/team/pvc/ws", "cfg": "/state/team/p/volumes/cfg"},
        workdir=tmp_path,
        node=NODE,
    )
    assert plan.argv == [
        "torchrun",
        "--nnodes=2",
        "/state/team/pvc/ws/train.py",
        "--data",
        "/state/team/pvc/ws/data",
        "$(NOT_EXPANDED)",
    ]
    assert plan.cwd == "/state/team/pvc/ws/run"
    assert plan.env == {
        "PET_NNODES": "2",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": "41234",
        "PET_NODE_RANK": "1",
        "DATA": "/state/team/pvc/ws/data",
        "URL": "127.0.0.1:41234",
        "CFG": "127.0.0.1:41234",
        "HOSTNAME": "train-node-0-1",
        "TRAINER_LOCAL_MOUNT_WS": "/state/team/pvc/ws",
        "TRAINER_LOCAL_MOUNT_CFG": "/state/team/p/volumes/cfg/LR",
    }
    assert plan.rewriter.map_path("/etc/app/lr") == "/state/team/p/volumes/cfg/LR"
    assert plan.process_env({"PATH": "/usr/bin", "HOSTNAME": "laptop"})["HOSTNAME"] == (
        "train-node-0-1"
    )
    assert plan.render(["sh", "-c", "nc -z $(PET_MASTER_ADDR) $(PET_MASTER_PORT)"]) == [
        "sh",
        "-c",
        "nc -z 127.0.0.1 41234",
    ]


@pytest.mark.parametrize(
    ("working_dir", "expected"),
    [("", "WORKDIR"), ("/app", "WORKDIR"), ("/data", "/v/data"), ("/data/sub", "/v/data/sub")],
)
def test_working_dir(tmp_path: Path, working_dir: str, expected: str) -> None:
    container = {
        "command": ["python"],
        "workingDir": working_dir,
        "volumeMounts": [{"name": "d", "mountPath": "/data/"}],
    }
    pod = pod_with(container)
    plan = plan_container(
        pod,
        pod["spec"]["containers"][0],
        sources=Sources(),
        volumes={"d": "/v/data"},
        workdir=tmp_path,
        node=NODE,
    )
    assert plan.cwd == (str(tmp_path) if expected == "WORKDIR" else expected)


def test_sub_path_expr_uses_the_container_env() -> None:
    container = {
        "command": ["cat", "/out/log"],
        "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "volumeMounts": [{"name": "logs", "mountPath": "/out", "subPathExpr": "$(POD)"}],
    }
    pod = pod_with(container)
    plan = plan_container(
        pod,
        pod["spec"]["containers"][0],
        sources=Sources(),
        volumes={"logs": "/v/logs"},
        workdir="/w",
        node=NODE,
    )
    assert plan.argv == ["cat", "/v/logs/train-node-0-0-abcde/log"]


# --- volumes --------------------------------------------------------------------------------------


def test_volume_layout_and_files(tmp_path: Path) -> None:
    pod = pod_with(
        {},
        volumes=[
            {"name": "scratch", "emptyDir": {"medium": "Memory"}},
            {"name": "init", "persistentVolumeClaim": {"claimName": "initializer"}},
            {
                "name": "cfg",
                "configMap": {
                    "name": "settings",
                    "defaultMode": 0o600,
                    "items": [
                        {"key": "LR", "path": "hp/lr.txt", "mode": 0o400},
                        {"key": "MASTER", "path": "master"},
                    ],
                },
            },
            {"name": "sec", "secret": {"secretName": "creds"}},
            {
                "name": "proj",
                "projected": {
                    "sources": [
                        {"secret": {"name": "creds", "items": [{"key": "USER", "path": "user"}]}},
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "labels",
                                        "fieldRef": {"fieldPath": "metadata.labels"},
                                    },
                                    {
                                        "path": "cpu",
                                        "resourceFieldRef": {
                                            "containerName": "node",
                                            "resource": "limits.cpu",
                                        },
                                    },
                                ]
                            }
                        },
                        {"serviceAccountToken": {"path": "token"}},
                    ]
                },
            },
            {"name": "odd", "nfs": {"server": "x", "path": "/"}},
        ],
    )
    with_token = Sources(SOURCES.config_maps, SOURCES.secrets, {("", 3600): "a.jwt.token"})
    with pytest.raises(ConfigError, match="no service account token for audience ''"):
        plan_volumes(pod, SOURCES, tmp_path, NODE)
    plans = {p.name: p for p in plan_volumes(pod, with_token, tmp_path, NODE)}
    base = tmp_path / "team" / "train-node-0-0-abcde" / "volumes"
    assert plans["scratch"].path == str(base / "scratch")
    assert plans["init"].path == str(tmp_path / "team" / "pvc" / "initializer")
    assert "nfs" in plans["odd"].note
    assert plans["proj"].note == ""
    for plan in plans.values():
        write_volume(plan)
    cfg = base / "cfg"
    assert (cfg / "hp" / "lr.txt").read_text() == "0.1"
    assert stat.S_IMODE((cfg / "hp" / "lr.txt").stat().st_mode) == 0o400
    assert stat.S_IMODE((cfg / "master").stat().st_mode) == 0o600
    assert not (cfg / "LR").exists()
    assert (base / "sec" / "TOKEN").read_text() == "s3cr3t"
    assert stat.S_IMODE((base / "sec" / "TOKEN").stat().st_mode) == 0o644
    assert (base / "proj" / "user").read_text() == "alice"
    assert (base / "proj" / "token").read_text() == "a.jwt.token"
    assert (base / "proj" / "labels").read_text() == 'jobset.sigs.k8s.io/jobset-name="train"'
    assert (base / "proj" / "cpu").read_text() == "8"
    assert (tmp_path / "team" / "pvc" / "initializer").is_dir()
    write_volume(plans["cfg"])  # a second write (a restarted kubelet) replaces read-only files


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        ({"configMap": {"name": "absent"}}, 'volume "v": configmap "absent" not found'),
        ({"secret": {"secretName": "nope"}}, 'volume "v": secret "nope" not found'),
        (
            {"configMap": {"name": "settings", "items": [{"key": "X", "path": "x"}]}},
            "has no key 'X'",
        ),
        (
            {"configMap": {"name": "settings", "items": [{"key": "LR", "path": "../x"}]}},
            "must be relative",
        ),
    ],
)
def test_volume_errors(tmp_path: Path, volume: dict[str, Any], message: str) -> None:
    pod = pod_with({}, volumes=[{"name": "v", **volume}])
    with pytest.raises(ConfigError, match=message) as err:
        plan_volumes(pod, SOURCES, tmp_path, NODE)
    assert err.value.reason == "ContainerCreating"


def test_optional_volume_sources_are_empty(tmp_path: Path) -> None:
    pod = pod_with({}, volumes=[{"name": "v", "configMap": {"name": "absent", "optional": True}}])
    (plan,) = plan_volumes(pod, SOURCES, tmp_path, NODE)
    assert plan.files == []


def test_token_requests_name_audience_and_expiry() -> None:
    pod = {
        "spec": {
            "volumes": [
                {
                    "name": "t",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"path": "a", "audience": "x"}},
                            {
                                "serviceAccountToken": {
                                    "path": "b",
                                    "audience": "y",
                                    "expirationSeconds": 600,
                                }
                            },
                            {"configMap": {"name": "c"}},
                        ]
                    },
                },
                {"name": "e", "emptyDir": {}},
            ]
        }
    }
    assert token_requests(pod) == {("x", 3600), ("y", 600)}
    assert service_account(pod) == "default"
    assert service_account({"spec": {"serviceAccountName": "trainer"}}) == "trainer"
