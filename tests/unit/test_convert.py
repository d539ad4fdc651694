"""``trainer convert`` and the TensorFlow / Paddle / elastic policies, checked pod by pod.

:func:`pods` plays the Job controller and kubelet on a rendered JobSet: one pod per replicated
job and index, its ``node`` container's env resolved (completion-index and job-index fieldRefs,
then Kubernetes ``$(VAR)`` expansion). The v1 expectations are written out by hand from the v1
operator's documented behaviour, role by role.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests import builders as b
from trainer.api import constants as c
from trainer.api.load import check_object, parse_object
from trainer.api.v1alpha1 import ClusterTrainingRuntime, TrainingRuntime, TrainJob
from trainer.cli.main import app
from trainer.convert import ConvertError, convert
from trainer.convert.equivalence import expand, resolved_env
from trainer.plugins.registry import render
from trainer.runtime.builtin import builtin_runtimes
from trainer.runtime.info import BuildContext, BuildError, SSHKeyPair

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "convert"


def v1(case: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((GOLDEN / case / "v1.yaml").read_text())
    return data


def jobset_of(trainjob: TrainJob, runtime: TrainingRuntime | ClusterTrainingRuntime) -> Any:
    if trainjob.metadata is not None and trainjob.metadata.namespace is None:
        trainjob.metadata.namespace = "default"
    keys = SSHKeyPair(b"private", b"public")
    objects = render(trainjob, runtime, ctx=BuildContext(lambda: keys))
    return next(o for o in objects if o["kind"] == "JobSet")


def converted_jobset(data: dict[str, Any]) -> Any:
    runtime, trainjob = (parse_object(o) for o in convert(data).objects)
    assert isinstance(runtime, TrainingRuntime) and isinstance(trainjob, TrainJob)
    return jobset_of(trainjob, runtime)


def pods(jobset: Any) -> dict[tuple[str, int], dict[str, Any]]:
    """``(replicatedJob, pod index) -> {"container": node container, "env": resolved env}``."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for rjob in jobset["spec"]["replicatedJobs"]:
        count = rjob["template"]["spec"]["parallelism"]
        pod = rjob["template"]["spec"]["template"]["spec"]
        node = next(ctr for ctr in pod["containers"] if ctr["name"] == c.CONTAINER_NODE)
        for job_index in range(rjob.get("replicas", 1)):
            for index in range(count):
                fields = {
                    c.FIELD_PATH_COMPLETION_INDEX: str(index),
                    c.FIELD_PATH_JOB_INDEX: str(job_index),
                }
                env = resolved_env(node, fields)
                key = (rjob["name"], job_index * count + index)
                out[key] = {"container": node, "pod": pod, "env": env}
    return out


# --- PyTorchJob: 1 Master + 3 Workers -------------------------------------------------------------
def test_pytorchjob_master_and_three_workers_role_by_role() -> None:
    data = v1("pytorch-master-3-workers")
    got = pods(converted_jobset(data))
    assert sorted(got) == [("node", i) for i in range(4)]
    specs = data["spec"]["pytorchReplicaSpecs"]
    # v1: pod <job>-master-0 is rank 0, <job>-worker-<i> is rank i + 1.
    v1_pods = [("Master", 0, 0)] + [("Worker", i, i + 1) for i in range(3)]
    for role, index, rank in v1_pods:
        pod = got[("node", rank)]
        v1_pod = specs[role]["template"]["spec"]
        v1_ctr = v1_pod["containers"][0]
        ctr = pod["container"]
        for key in ("image", "command", "resources", "volumeMounts"):
            assert ctr[key] == v1_ctr[key], (role, index, key)
        for key in ("nodeSelector", "tolerations", "volumes"):
            assert pod["pod"][key] == v1_pod[key], (role, index, key)
        assert pod["pod"]["restartPolicy"] == "OnFailure"
        env = pod["env"]
        assert env["LOG_LEVEL"] == "info"  # the user's env
        assert env["PYTHONUNBUFFERED"] == "0"  # v1's value (any non-empty value unbuffers)
        assert env["MASTER_ADDR"] == "mnist-node-0-0.mnist"  # v1: mnist-master-0
        assert env["MASTER_PORT"] == "23456"
        assert env["WORLD_SIZE"] == "4"
        assert env["RANK"] == str(rank)
        assert env["PET_NODE_RANK"] == str(rank)
        assert env["PET_NNODES"] == "4"


def test_pytorchjob_run_policy() -> None:
    runtime, trainjob = convert(v1("pytorch-master-3-workers")).objects
    spec = runtime["spec"]
    assert spec["template"]["spec"]["failurePolicy"] == {"maxRestarts": 3}
    assert spec["template"]["spec"]["ttlSecondsAfterFinished"] == 600
    assert spec["podGroupPolicy"] == {"coscheduling": {"scheduleTimeoutSeconds": 120}}
    assert trainjob["spec"]["activeDeadlineSeconds"] == 3600
    assert trainjob["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "research"}
    warnings = [w.field for w in convert(v1("pytorch-master-3-workers")).warnings]
    assert warnings == ["spec.runPolicy.cleanPodPolicy"]


def test_pytorchjob_with_different_templates_wraps_the_worker_command() -> None:
    data = v1("pytorch-different-templates")
    result = convert(data)
    _, trainjob = result.objects
    assert trainjob["spec"]["suspend"] is True
    assert trainjob["spec"]["managedBy"] == c.MANAGED_BY_MULTIKUEUE
    got = pods(converted_jobset(data))
    assert sorted(got) == [("master", 0), ("worker", 0), ("worker", 1)]
    assert got[("master", 0)]["env"]["RANK"] == "0"
    assert got[("master", 0)]["env"]["PET_NODE_RANK"] == "0"
    assert got[("master", 0)]["container"]["command"] == ["python", "train.py"]
    for i in range(2):
        env = got[("worker", i)]["env"]
        assert env["MASTER_ADDR"] == "uneven-master-0-0.uneven"
        assert env["WORLD_SIZE"] == "3"
        assert env["PET_NNODES"] == "3"  # v1 sets PET_* with a Master; no torch policy here
        assert env["PET_NPROC_PER_NODE"] == "auto"
        assert env["JOB_COMPLETION_INDEX"] == str(i)
        command = got[("worker", i)]["container"]["command"]
        assert command[:2] == ["/bin/sh", "-c"] and command[3:] == ["python", "train.py", "--fast"]
        assert "args" not in got[("worker", i)]["container"]
    assert len(result.warnings) == 2


def test_pytorchjob_with_different_templates_runs_the_rank_prefix(tmp_path: Path) -> None:
    """The shell prefix really exports index + 1 (run with the kubelet's $(VAR) expansion)."""
    got = pods(converted_jobset(v1("pytorch-different-templates")))
    command = [expand(a, {}) for a in got[("worker", 1)]["container"]["command"]]
    command[3:] = ["sh", "-c", "echo $RANK $PET_NODE_RANK"]
    out = subprocess.run(
        command,
        env={"JOB_COMPLETION_INDEX": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        check=True,
    )
    assert out.stdout.decode().strip() == "2 2"


def test_elastic_pytorchjob() -> None:
    result = convert(v1("pytorch-elastic"))
    runtime, trainjob = result.objects
    assert runtime["spec"]["mlPolicy"]["torch"] == {
        "elasticPolicy": {"minNodes": 2, "maxNodes": 4, "maxRestarts": 3}
    }
    assert trainjob["spec"]["trainer"] == {"numNodes": 3, "numProcPerNode": 1}
    assert [w.field for w in result.warnings] == [
        "spec.elasticPolicy.maxReplicas",
        "spec.elasticPolicy.metrics",
    ]
    got = pods(converted_jobset(v1("pytorch-elastic")))
    assert sorted(got) == [("node", i) for i in range(3)]
    for i in range(3):
        env = got[("node", i)]["env"]
        assert env["PET_NNODES"] == "2:4"
        assert env["PET_RDZV_BACKEND"] == "c10d"
        assert env["PET_RDZV_ENDPOINT"] == "elastic-imagenet-node-0-0.elastic-imagenet:29500"
        assert env["PET_MAX_RESTARTS"] == "3"
        assert env["PET_NODE_RANK"] == str(i)
        assert "MASTER_ADDR" not in env and "RANK" not in env  # v1: only with a Master


# --- TFJob: Chief + 2 Workers + 2 PS --------------------------------------------------------------
def test_tfjob_chief_workers_ps_tf_config_role_by_role() -> None:
    data = v1("tfjob-chief-workers-ps")
    runtime, _ = convert(data).objects
    assert runtime["spec"]["podGroupPolicy"] == {"volcano": {}}
    assert runtime["spec"]["template"]["metadata"]["annotations"] == {
        c.ANNOTATION_VOLCANO_QUEUE: "training"
    }
    got = pods(converted_jobset(data))
    # v1: TF_CONFIG cluster {chief: [1], worker: [2], ps: [2]}, task = (role, replica index).
    v1_pods = [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1)]
    assert sorted(got) == sorted(v1_pods)
    for role, index in v1_pods:
        pod = got[(role, index)]
        assert pod["pod"]["priorityClassName"] == "high"
        assert pod["pod"]["schedulerName"] == "volcano"
        assert pod["container"]["image"] == "kubeflow/tf-dist-mnist-test:v1-855e096"
        config = json.loads(pod["env"]["TF_CONFIG"])
        assert config["task"] == {"type": role, "index": index}
        assert {k: len(v) for k, v in config["cluster"].items()} == {
            "chief": 1,
            "worker": 2,
            "ps": 2,
        }
        assert config["cluster"]["worker"][1] == "dist-mnist-worker-0-1.dist-mnist:29500"
    assert got[("chief", 0)]["pod"]["restartPolicy"] == "Never"
    assert got[("worker", 0)]["pod"]["restartPolicy"] == "OnFailure"


def check_tf_config(raw: str, *, type_: str, index: int) -> None:
    """TF_CONFIG as TensorFlow documents it (tf.distribute.cluster_resolver.TFConfigClusterResolver
    and the multi-worker guide): a JSON object with "cluster" (task type -> list of
    "host:port") and "task" ({"type", "index"}), the task's type in the cluster (or
    "evaluator", which is never in it) and its index inside that list."""
    config = json.loads(raw)
    assert set(config) == {"cluster", "task"}
    cluster, task = config["cluster"], config["task"]
    assert isinstance(cluster, dict) and cluster
    assert set(cluster) <= {"chief", "master", "worker", "ps"}
    assert len(cluster.get("chief", [])) <= 1
    for hosts in cluster.values():
        assert isinstance(hosts, list) and hosts
        for address in hosts:
            host, _, port = address.rpartition(":")
            assert host and "." in host and port.isdigit() and 0 < int(port) < 65536
    assert set(task) == {"type", "index"}
    assert isinstance(task["index"], int) and not isinstance(task["index"], bool)
    assert task["type"] == type_ and task["index"] == index
    if task["type"] != "evaluator":
        assert 0 <= task["index"] < len(cluster[task["type"]])


def test_two_worker_tensorflow_job_tf_config_is_what_mwms_accepts() -> None:
    job = b.trainjob_model("tf2", runtime="tensorflow-distributed", num_nodes=2)
    got = pods(jobset_of(job, builtin_runtimes()["tensorflow-distributed"]))
    assert sorted(got) == [("node", 0), ("node", 1)]
    hosts = ["tf2-node-0-0.tf2:29500", "tf2-node-0-1.tf2:29500"]
    for i in range(2):
        raw = got[("node", i)]["env"]["TF_CONFIG"]
        check_tf_config(raw, type_="worker", index=i)
        assert json.loads(raw)["cluster"] == {"worker": hosts}


def test_tf_config_evaluator_and_job_index() -> None:
    runtime = ClusterTrainingRuntime.from_wire(
        yaml.safe_load(
            """
metadata: {name: tf}
spec:
  mlPolicy: {numNodes: 3, tensorflow: {}}
  template:
    spec:
      replicatedJobs:
      - name: worker
        template:
          metadata: {labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}}
          spec: {template: {spec: {containers: [{name: node, image: tf}]}}}
      - name: ps
        replicas: 2
        template: {spec: {template: {spec: {containers: [{name: node, image: tf}]}}}}
      - name: evaluator
        template: {spec: {template: {spec: {containers: [{name: node, image: tf}]}}}}
"""
        )
    )
    job = b.trainjob_model("t", namespace=None, runtime="tf")
    got = pods(jobset_of(job, runtime))
    expected = [("worker", i) for i in range(3)] + [("ps", 0), ("ps", 1), ("evaluator", 0)]
    assert sorted(got) == sorted(expected)
    for role, index in expected:
        check_tf_config(got[(role, index)]["env"]["TF_CONFIG"], type_=role, index=index)
    cluster = json.loads(got[("evaluator", 0)]["env"]["TF_CONFIG"])["cluster"]
    assert cluster["ps"] == ["t-ps-0-0.t:29500", "t-ps-1-0.t:29500"]
    assert "evaluator" not in cluster


def test_tf_role_with_replicas_and_several_pods_is_a_build_error() -> None:
    runtime = ClusterTrainingRuntime.from_wire(
        yaml.safe_load(
            """
metadata: {name: tf}
spec:
  mlPolicy: {tensorflow: {}}
  template:
    spec:
      replicatedJobs:
      - name: ps
        replicas: 2
        template: {spec: {parallelism: 2, template: {spec: {containers: [{name: node}]}}}}
"""
        )
    )
    job = b.trainjob_model("t", namespace=None, runtime="tf")
    with pytest.raises(BuildError, match="replicatedJob 'ps' has 2 replicas of 2 pods"):
        jobset_of(job, runtime)


# --- Other kinds ----------------------------------------------------------------------------------
def test_xgboostjob_env_role_by_role() -> None:
    got = pods(converted_jobset(v1("xgboostjob")))
    hosts = [f"xgboost-dist-iris-node-0-{i}.xgboost-dist-iris" for i in range(3)]
    for rank in range(3):
        env = got[("node", rank)]["env"]
        assert env["MASTER_ADDR"] == hosts[0]
        assert env["MASTER_PORT"] == "9991"  # the container's xgboostjob-port
        assert env["WORLD_SIZE"] == "3"
        assert env["RANK"] == str(rank)
        assert env["WORKER_ADDRS"] == ",".join(hosts[1:])
        assert env["WORKER_PORT"] == "9991"  # v1: the Worker template's xgboostjob-port
        assert env["PYTHONUNBUFFERED"] == "0"
        assert env["DMLC_TASK_ID"] == str(rank)
        assert got[("node", rank)]["pod"]["restartPolicy"] == "Never"


def test_xgboostjob_of_one_master_has_no_worker_env_and_defaults_to_never() -> None:
    data = v1("xgboostjob")
    del data["spec"]["xgbReplicaSpecs"]["Worker"]
    del data["spec"]["xgbReplicaSpecs"]["Master"]["restartPolicy"]
    got = pods(converted_jobset(data))
    env = got[("node", 0)]["env"]
    assert env["WORLD_SIZE"] == "1" and env["RANK"] == "0"
    assert "WORKER_PORT" not in env and "WORKER_ADDRS" not in env  # v1: only for > 1 pod
    assert got[("node", 0)]["pod"]["restartPolicy"] == "Never"  # v1's XGBoost default


def test_jaxjob_env() -> None:
    got = pods(converted_jobset(v1("jaxjob")))
    for i in range(2):
        env = got[("node", i)]["env"]
        assert env["COORDINATOR_ADDRESS"] == "jaxjob-simple-node-0-0.jaxjob-simple"
        assert env["COORDINATOR_PORT"] == "6666"
        assert env["NUM_PROCESSES"] == "2"
        assert env["PROCESS_ID"] == str(i)
        assert env["JAX_PROCESS_ID"] == str(i)
        assert env["PYTHONUNBUFFERED"] == "1"  # v1's JAX value
        assert got[("node", i)]["container"]["imagePullPolicy"] == "Always"


def test_paddlejob_env() -> None:
    """v1 collective mode: worker 0 is the rendezvous on the container's ``master`` port
    (default 36543); PADDLE_NNODES counts every replica; no PADDLE_RANK."""
    runtime, _ = convert(v1("paddlejob")).objects
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 2}
    got = pods(converted_jobset(v1("paddlejob")))
    for i in range(2):
        env = got[("node", i)]["env"]
        assert env["PADDLE_MASTER"] == "paddle-simple-gpu-node-0-0.paddle-simple-gpu:36543"
        assert env["PADDLE_NNODES"] == "2"
        assert env["PADDLE_JOB_ID"] == "paddle-simple-gpu"
        assert env["PYTHONUNBUFFERED"] == "0"
        assert "PADDLE_RANK" not in env and "PADDLE_TRAINER_NUM" not in env
        assert {"name": "master", "containerPort": 36543} in got[("node", i)]["container"]["ports"]


def test_paddlejob_parameter_server_mode_env() -> None:
    data = v1("paddlejob")
    specs = data["spec"]["paddleReplicaSpecs"]
    specs["Master"] = json.loads(json.dumps(specs["Worker"]))
    specs["Master"]["replicas"] = 1
    specs["Master"]["template"]["spec"]["containers"][0]["ports"] = [
        {"name": "master", "containerPort": 8000}
    ]
    got = pods(converted_jobset(data))
    assert sorted(got) == [("master", 0), ("node", 0), ("node", 1)]
    for key, pod in got.items():
        env = pod["env"]
        assert env["PADDLE_MASTER"] == "paddle-simple-gpu-master-0-0.paddle-simple-gpu:8000"
        assert env["PADDLE_NNODES"] == "3"
        role = "SERVER" if key[0] == "master" else "TRAINER"
        other = "TRAINER" if role == "SERVER" else "SERVER"
        assert env[f"PADDLE_{role}_NUM"] == "1" and f"PADDLE_{other}_NUM" not in env


def test_mpijob() -> None:
    runtime, trainjob = convert(v1("mpijob-v2beta1")).objects
    assert runtime["spec"]["mlPolicy"] == {
        "numNodes": 1,
        "mpi": {"numProcPerNode": 2, "sshAuthMountPath": "/home/mpiuser/.ssh"},
    }
    jobs = {j["name"]: j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    assert jobs["launcher"]["dependsOn"] == [{"name": "node", "status": "Ready"}]
    assert trainjob["spec"]["trainer"] == {"numNodes": 2}
    got = pods(converted_jobset(v1("mpijob-v2beta1")))
    assert sorted(got) == [("launcher", 0), ("node", 0), ("node", 1)]


# --- Errors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}},
            "kind 'Deployment' is not a Training Operator v1 job",
        ),
        (
            {"apiVersion": "kubeflow.org/v2beta1", "kind": "PyTorchJob", "metadata": {"name": "p"}},
            "apiVersion 'kubeflow.org/v2beta1' of PyTorchJob is not supported",
        ),
        (
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "p"},
                "spec": {},
            },
            "spec.pytorchReplicaSpecs: missing or empty",
        ),
        (
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "metadata": {"name": "t"},
                "spec": {"tfReplicaSpecs": {"Boss": {}}},
            },
            "spec.tfReplicaSpecs.Boss: unknown replica type",
        ),
        (
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "JAXJob",
                "metadata": {"name": "j"},
                "spec": {"jaxReplicaSpecs": {"Worker": {"template": {"spec": {}}}}},
            },
            "spec.jaxReplicaSpecs.Worker.template.spec.containers: must list a container",
        ),
        (
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "p"},
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Worker": {
                            "replicas": "3",
                            "template": {"spec": {"containers": [{"name": "pytorch"}]}},
                        }
                    }
                },
            },
            "spec.pytorchReplicaSpecs.Worker.replicas: must be an integer",
        ),
        ([1, 2], "not an object"),
    ],
)
def test_input_that_is_not_a_v1_job_is_an_error(data: Any, message: str) -> None:
    with pytest.raises(ConvertError, match=message.replace(".", r"\.").replace("(", r"\(")):
        convert(data, "in.yaml")


def test_elastic_range_outside_the_replicas_is_an_error() -> None:
    data = v1("pytorch-elastic")
    data["spec"]["elasticPolicy"]["minReplicas"] = 4
    with pytest.raises(ConvertError, match=r"spec\.elasticPolicy: the job has 3 nodes"):
        convert(data)


# --- CLI ------------------------------------------------------------------------------------------
def test_cli_writes_one_file_per_job(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "convert",
            "-f",
            str(GOLDEN / "pytorch-master-3-workers" / "v1.yaml"),
            "-f",
            str(GOLDEN / "jaxjob" / "v1.yaml"),
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "kubeflow-jaxjob-simple.yaml",
        "team-a-mnist.yaml",
    ]
    docs = list(yaml.safe_load_all((out / "team-a-mnist.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["TrainingRuntime", "TrainJob"]
    for doc in docs:
        assert check_object(doc).ok
    assert "warning: PyTorchJob/mnist: spec.runPolicy.cleanPodPolicy:" in result.stderr


def test_cli_rejects_input_that_is_not_a_v1_job_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (GOLDEN / "jaxjob" / "v1.yaml").read_text()
        + "---\napiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainJob\nmetadata: {name: x}\n"
    )
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["convert", "-f", str(bad), "-o", str(out)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert (
        result.stderr.startswith("error: ")
        and "kind 'TrainJob' is not a Training Operator v1 job" in result.stderr
    )
    assert len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


# --- CRD rules of the new fields ------------------------------------------------------------------
def test_crd_rules_of_the_new_policies() -> None:
    base = yaml.safe_load(
        (GOLDEN.parents[2] / "runtimes" / "tensorflow-distributed.yaml").read_text()
    )
    assert check_object(base).ok
    both = json.loads(json.dumps(base))
    both["spec"]["mlPolicy"]["paddle"] = {}
    assert "Only one of the policy can be configured" in str(
        [str(e) for e in check_object(both).errors]
    )
    elastic = json.loads(json.dumps(base))
    del elastic["spec"]["mlPolicy"]["tensorflow"]
    elastic["spec"]["mlPolicy"]["torch"] = {"elasticPolicy": {"minNodes": 3, "maxNodes": 2}}
    assert "minNodes must be less than or equal to maxNodes" in str(
        [str(e) for e in check_object(elastic).errors]
    )


def test_the_replica_restart_policy_or_v1_default_overrides_the_template() -> None:
    """v1 defaults each replica's restartPolicy (PyTorch OnFailure) and writes it over the pod
    template's, so a template restartPolicy never reaches the pods."""
    data = v1("pytorch-elastic")
    worker = data["spec"]["pytorchReplicaSpecs"]["Worker"]
    del worker["restartPolicy"]
    worker["template"]["spec"]["restartPolicy"] = "Never"
    got = pods(converted_jobset(data))
    assert {pod["pod"]["restartPolicy"] for pod in got.values()} == {"OnFailure"}


def test_intel_mpijobs_are_an_error_naming_the_field_and_accepted_values() -> None:
    data = v1("mpijob-v2beta1")
    data["spec"]["mpiImplementation"] = "Intel"
    with pytest.raises(ConvertError) as info:
        convert(data, "in.yaml")
    message = str(info.value)
    assert message.startswith("in.yaml: MPIJob/pi: spec.mpiImplementation: 'Intel' cannot")
    assert 'accepts only "OpenMPI" and "MPICH" (Intel MPI is not supported' in message
    assert "Build the image with OpenMPI or MPICH" in message


def test_mpich_mpijobs_convert_to_the_mpich_policy_with_a_warning() -> None:
    data = v1("mpijob-v2beta1")
    data["spec"]["mpiImplementation"] = "MPICH"
    result = convert(data)
    runtime, trainjob = result.objects
    assert runtime["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] == "MPICH"
    warning = next(w for w in result.warnings if w.field == "spec.mpiImplementation")
    assert "only this project's CRDs admit" in warning.message
    assert check_object(runtime).ok and check_object(trainjob).ok
    jobset = converted_jobset(data)
    launcher = pods(jobset)[("launcher", 0)]
    env = launcher["env"]
    assert env["HYDRA_HOST_FILE"] == "/etc/mpi/hostfile"
    assert "OMPI_MCA_orte_default_hostfile" not in env


@pytest.mark.parametrize(
    ("api_version", "launcher", "worker"),
    [("kubeflow.org/v1", "Never", "Never"), ("kubeflow.org/v2beta1", "OnFailure", "Never")],
)
def test_mpijob_default_restart_policies(api_version: str, launcher: str, worker: str) -> None:
    data = v1("mpijob-v2beta1")
    data["apiVersion"] = api_version
    for spec in data["spec"]["mpiReplicaSpecs"].values():
        spec.pop("restartPolicy", None)
    got = pods(converted_jobset(data))
    assert got[("launcher", 0)]["pod"]["restartPolicy"] == launcher
    assert got[("node", 0)]["pod"]["restartPolicy"] == worker
