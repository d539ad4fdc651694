"""Our node agent (``trainer node``: the executor's kubelet alone) as Node ``agent-0`` of the
bed's real control plane, with a node's credentials (``system:node:agent-0``, so the Node
authorizer and NodeRestriction judge every request as a kubelet's): it registers Ready, renews
its Lease, runs the pods kube-scheduler binds to it as local processes, and kube-apiserver
stores the status it reports (docs/local-plane.md, "A node of a real cluster").

The node (tests/cluster/nodeagent.py, the session's) is tainted and labelled so that only pods
placed there on purpose land there: this module's, and the Helm chart's installer Jobs
(test_helm.py)."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import bed as beds
import trainer_install
import yaml
from addons import deployment
from netns import AGENT_POD_CIDR
from procs import wait_for

from tests.cluster.conftest import ROOT, kubectl_json
from tests.cluster.nodeagent import MARK, NODE, Agent, Lines
from tests.cluster.test_controller_ha import (
    LEASE,
    assert_once_each,
    create_many,
    holder,
    jobset_uids,
    kill,
)
from tests.cluster.test_lifecycle import wait


def pod(name: str, command: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "tolerations": [{"key": MARK, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "python:3.12-slim", "command": command}],
        },
    }


def run_pod(bed: beds.Bed, namespace: str, body: dict[str, Any], phase: str) -> dict[str, Any]:
    """Create the pod, await ``phase`` through a watch (kubectl wait), return it as stored."""
    bed.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(body))
    name = body["metadata"]["name"]
    done = bed.kubectl(
        "wait", "-n", namespace, f"pod/{name}", f"--for=jsonpath={{.status.phase}}={phase}",
        "--timeout=30s", check=False, timeout=40,
    )  # fmt: skip
    stored = kubectl_json(bed, "get", "pod", name, "-n", namespace)
    assert done.returncode == 0, f"{name}: not {phase}: {done.stderr}\n{yaml.safe_dump(stored)}"
    return stored


def test_the_node_registers_ready(bed: beds.Bed, agent: Agent) -> None:
    agent.out.until(lambda line: f"node {NODE} registered" in line, 30, "registration")
    done = bed.kubectl(
        "wait", f"node/{NODE}", "--for=condition=Ready", "--timeout=30s", check=False, timeout=40
    )
    assert done.returncode == 0, done.stderr
    node = kubectl_json(bed, "get", "node", NODE)
    assert node["metadata"]["labels"][MARK] == "test"
    assert {"key": MARK, "value": "test", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert node["status"]["allocatable"]["cpu"] == "4"
    # The Lease's renewals, watched from now on (checked last: one comes every 10 s).
    watch = subprocess.Popen(
        [
            "kubectl", f"--kubeconfig={bed.kubeconfig}", "get", "lease", NODE, "-n",
            "kube-node-lease", "--watch", "-o", "jsonpath={.spec.renewTime}{'\\n'}",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert watch.stdout is not None
    agent.watch, agent.leases = watch, Lines(watch.stdout)


def test_a_pod_bound_by_kube_scheduler_succeeds(
    bed: beds.Bed, agent: Agent, namespace: str
) -> None:
    stored = run_pod(bed, namespace, pod("hello", ["python3", "-c", "print(6 * 7)"]), "Succeeded")
    assert stored["spec"]["nodeName"] == NODE
    (status,) = stored["status"]["containerStatuses"]
    terminated = status["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    conditions = {c["type"]: c["status"] for c in stored["status"]["conditions"]}
    assert conditions["PodScheduled"] == "True" and conditions["Ready"] == "False"
    assert stored["status"]["hostIP"] == "127.0.0.1" and stored["status"]["startTime"]
    events = kubectl_json(bed, "get", "events", "-n", namespace)["items"]
    scheduled = [e for e in events if e["reason"] == "Scheduled"]
    assert scheduled and f"to {NODE}" in scheduled[0]["message"]
    started = [e for e in events if e["reason"] == "Started"]
    assert started and started[0]["source"] == {"component": "kubelet", "host": NODE}
    logs = list((agent.state / "logs").glob(f"{namespace}_hello_*/main/0.log"))
    assert [p.read_text() for p in logs] == ["42\n"]


def test_a_failing_pod_reports_its_exit_code(bed: beds.Bed, agent: Agent, namespace: str) -> None:
    body = pod("fails", ["sh", "-c", "echo cannot go on >&2; exit 3"])
    stored = run_pod(bed, namespace, body, "Failed")
    (status,) = stored["status"]["containerStatuses"]
    terminated = status["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")


FINAL = re.compile(r"rank (\d) final loss: ([0-9.]+) weights checksum: (-?[0-9.]+)")


ALLREDUCE = re.compile(r"rank (\d)/4 on \S+: allreduce sum (\d+) \(expected 10\)")


def placed(documents: list[dict[str, Any]], jobs: list[str]) -> list[dict[str, Any]]:
    """The TrainJob among ``documents`` with its ``jobs``' pods placed on this node by a
    runtime patch (as a platform team places pods on a pool)."""
    placement = {
        "nodeSelector": {"kubernetes.io/hostname": NODE},
        "tolerations": [{"key": MARK, "operator": "Exists", "effect": "NoSchedule"}],
    }
    patch = {
        "manager": "trainer.kubeflow.org/node-agent-test",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {"name": job, "template": {"spec": {"template": {"spec": placement}}}}
                        for job in jobs
                    ]
                }
            }
        },
    }
    for document in documents:
        if document["kind"] == "TrainJob":
            document["spec"]["runtimePatches"] = [patch]
    return documents


def await_complete(bed: beds.Bed, agent: Agent, namespace: str, name: str) -> dict[str, str]:
    """Until TrainJob ``name`` is Complete; the logs of its pods' ``node`` containers by pod
    directory (failing with its status and those logs when it is not)."""
    # Finished either way (completionTime is set on Complete and on Failed), then Complete.
    done = bed.kubectl(
        "wait", "-n", namespace, f"trainjob/{name}", "--for=jsonpath={.status.completionTime}",
        "--timeout=150s", check=False, timeout=160,
    )  # fmt: skip
    logs = {
        path.parent.parent.name: path.read_text()
        for path in (agent.state / "logs").glob(f"{namespace}_{name}-*/node/0.log")
    }
    shown = "\n".join(f"--- {k}\n{v[-1500:]}" for k, v in sorted(logs.items()))
    stored = kubectl_json(bed, "get", "trainjob", name, "-n", namespace)
    conditions = {c["type"]: c["status"] for c in stored["status"].get("conditions") or []}
    assert done.returncode == 0 and conditions.get("Complete") == "True", (
        f"{done.stderr}\n{yaml.safe_dump(stored['status'])}{shown}"
    )
    pods = kubectl_json(bed, "get", "pods", "-n", namespace)["items"]
    assert {p["spec"]["nodeName"] for p in pods} == {NODE}
    # Pods that serve the others (an MPI node's sshd) end when the JobSet, complete, has
    # their Jobs stopped: a moment after the TrainJob's Complete. None may have failed.
    phases: set[str] = set()

    def ended() -> bool:
        items = kubectl_json(bed, "get", "pods", "-n", namespace)["items"]
        phases.clear()
        phases.update(p["status"]["phase"] for p in items)
        return not phases & {"Pending", "Running"}

    wait_for("the TrainJob's pods to end", ended, 30, interval=0.5)
    assert phases <= {"Succeeded"}, phases
    return logs


def test_the_quickstart_ddp_trainjob_trains_on_this_node(
    bed: beds.Bed, agent: Agent, namespace: str
) -> None:
    """The quickstart's TrainJob (examples/torch-ddp-cpu) through the real JobSet, Job and
    scheduler, our controller and webhook, and this node's kubelet: both ranks train and end
    with the same loss and weights."""
    trainjob = yaml.safe_load((ROOT / "examples/torch-ddp-cpu/trainjob.yaml").read_text())
    name = trainjob["metadata"]["name"] = "ddp-on-agent"
    # The script by absolute path: the agent's working directory is not the checkout.
    trainer = trainjob["spec"]["trainer"]
    trainer["command"] = ["torchrun", str(ROOT / "examples/torch-ddp-cpu/train.py")]
    trainer["env"] = [{"name": "EPOCHS", "value": "3"}]
    runtime = ROOT / "runtimes/torch-local-cpu.yaml"
    bed.kubectl("apply", "--server-side", "-f", str(runtime))
    try:
        body = yaml.safe_dump_all(placed([trainjob], ["node"]))
        bed.kubectl("create", "-n", namespace, "-f", "-", input=body)
        logs = await_complete(bed, agent, namespace, name)
    finally:
        bed.kubectl("delete", "-f", str(runtime), "--wait=false", check=False)
    shown = "\n".join(logs.values())
    finals = sorted(m.groups() for text in logs.values() for m in FINAL.finditer(text))
    assert [f[0] for f in finals] == ["0", "1"], shown
    assert finals[0][1:] == finals[1][1:], shown  # the same loss and weights on both ranks
    assert float(finals[0][1]) < 0.1, shown  # and it learned


def test_an_mpi_trainjob_runs_over_real_ssh_on_this_node(
    bed: beds.Bed, agent: Agent, namespace: str
) -> None:
    """examples/mpi4py-allreduce: the real JobSet controller makes the pods (without the port
    map the plane's JobSet controller writes); the node gives each sshd a port, the launcher's
    mpirun reaches both node pods through OpenSSH and all four ranks sum 1 to 4."""
    example = ROOT / "examples/mpi4py-allreduce"
    documents = placed(
        list(yaml.safe_load_all((example / "trainjob.yaml").read_text())), ["node", "launcher"]
    )
    for document in documents:
        if document["kind"] == "TrainJob":
            name = document["metadata"]["name"]
            document["spec"]["trainer"]["command"] = [
                "mpirun", "python", str(example / "allreduce.py")
            ]  # fmt: skip
    bed.kubectl("create", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(documents))
    logs = await_complete(bed, agent, namespace, name)
    shown = "\n".join(logs.values())
    sums = sorted(m.groups() for text in logs.values() for m in ALLREDUCE.finditer(text))
    assert sums == [(str(r), "10") for r in range(4)], shown


REPLICAS = ("trainer", "trainer-b")
"""The bed's own replicas of our controller (processes: hack/testbed/trainer_install.py)."""


def pid_of_pod(pod: str) -> int:
    """The controller process of pod ``pod`` on this node: the one whose ``$HOSTNAME`` is the
    pod's (the kubelet sets it to the pod's hostname)."""
    wanted = f"HOSTNAME={pod}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in env and b"controller" in argv:
            return int(entry.name)
    raise AssertionError(f"no controller process of pod {pod} on this host")


def test_the_controller_deployment_runs_here_and_a_live_replica_takes_over(
    bed: beds.Bed, agent: Agent, namespace: str
) -> None:
    """The install's controller Deployment (manifests/overlays/standalone: two replicas, the
    image's entrypoint, its ServiceAccount's token) run by this node, placed here as the
    TrainJobs are: Available; its pods' addresses, from the node's pod network, reach
    kube-apiserver through the Service's EndpointSlice, so it calls their webhook; the bed's
    own replicas stopped, a pod leads and reconciles; its process killed, a live replica takes
    the Lease over and nothing is lost or made twice."""
    objects = trainer_install.manifests()
    # A 5 s Lease, in a ConfigMap of its own beside the bed's: the takeover below waits one.
    short = trainer_install.with_short_lease(objects, f"{trainer_install.CONFIG}-agent")
    (config,) = [o for o in short if o["metadata"]["name"] == f"{trainer_install.CONFIG}-agent"]
    manager = deployment(short)
    name = manager["metadata"]["name"]
    manager["spec"]["template"]["spec"].update(
        nodeSelector={"kubernetes.io/hostname": NODE},
        tolerations=[{"key": MARK, "operator": "Exists", "effect": "NoSchedule"}],
    )
    ns = trainer_install.NAMESPACE
    stopped: list[str] = []
    bed.apply([config, manager], manager="kubectl")
    try:
        wait(bed, ns, f"deployment/{name}", "condition=Available", 90)
        pods = kubectl_json(bed, "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component")
        names = sorted(p["metadata"]["name"] for p in pods["items"])
        assert len(names) == 2 and {p["spec"]["nodeName"] for p in pods["items"]} == {NODE}
        network = ipaddress.ip_network(AGENT_POD_CIDR)
        assert all(ipaddress.ip_address(p["status"]["podIP"]) in network for p in pods["items"])
        # The bed's replicas go, gracefully (the Lease released): the pods alone serve.
        for replica in [r for r in REPLICAS if r in bed.procs]:
            kill(bed, replica, graceful=True)
            stopped.append(replica)
        wait_for("a pod of the Deployment to lead", lambda: holder(bed).split("_")[0] in names, 30)
        killed = holder(bed)
        first = create_many(bed, namespace, "agent-ha", 3, run_for="10s")  # the webhook admits
        before = jobset_uids(bed, namespace, first)
        os.kill(pid_of_pod(killed.split("_")[0]), signal.SIGKILL)
        # Once the Lease expires, a live replica takes it: the other pod, or the killed pod's
        # container restarted by this node (a new identity), whichever asks first, as on any
        # cluster.
        wait_for(
            "a live replica to take the Lease over",
            lambda: holder(bed) not in ("", killed) and holder(bed).split("_")[0] in names,
            60, interval=0.5,
        )  # fmt: skip
        print(f"the Lease: {killed} killed, {holder(bed)} took it over")
        second = create_many(bed, namespace, "agent-ha-after", 2, run_for="1s")
        assert_once_each(bed, namespace, first + second)
        assert {k: v for k, v in jobset_uids(bed, namespace, first).items() if k in first} == before
        lease = kubectl_json(bed, "get", "lease", LEASE, "-n", ns)
        assert lease["spec"].get("leaseTransitions", 0) >= 2, json.dumps(lease["spec"])
    finally:
        # The bed as it was: its replicas back, the Deployment gone, a replica leading.
        for replica in stopped:
            trainer_install.start_controller(bed, objects, replica)
        bed.kubectl("delete", "deployment", name, "-n", ns, "--wait=true", "--timeout=60s")
        bed.kubectl("delete", "configmap", config["metadata"]["name"], "-n", ns)
        if stopped:
            wait_for(
                "a replica of the bed to lead again",
                lambda: holder(bed).split("_")[0] in REPLICAS, 60, interval=0.5,
            )  # fmt: skip


def test_the_lease_renews_and_no_request_was_refused(agent: Agent) -> None:
    assert agent.leases is not None, "the node never registered"
    first = agent.leases.until(bool, 15, "the Lease")
    agent.leases.until(lambda line: bool(line) and line != first, 15, "a renewal of the Lease")
    assert agent.proc.poll() is None, "the node agent exited"
    assert not agent.refusals(), "\n".join(agent.refusals())
