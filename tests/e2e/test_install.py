"""The production install, rehearsed on the local plane (docs/install.md, "Rehearsing an install
locally"): ``trainer up --without-controller``, then ``kubectl apply --server-side -k
manifests/overlays/standalone`` exactly as an admin runs it on a cluster. The Deployment's two
replicas run ``trainer controller`` from the image's entrypoint with the in-cluster
configuration and the manifests' ServiceAccount (RBAC enforced), the API server calls the
webhook through its Service and EndpointSlice, and:

- TrainJobs run through the deployed controller; a rejected one gets the webhook's message;
- deleting the leader's pod hands the Lease to the other replica within the Lease's duration,
  and TrainJobs created meanwhile are each reconciled once (one JobSet each);
- a forced certificate rotation (delete the Secret, restart the Deployment: docs/
  certificates.md) rolls the pods one by one and admission works with the new CA;
- a pod reaches the webhook Service by its DNS name from its own sandbox;
- no request of the controllers is ever refused by RBAC (no 403 in their logs);
- the dashboard ``trainer up`` serves by default answers before the install, waiting for the
  Trainer CRDs, and lists the TrainJobs once they are applied; the plane stays up throughout.

The figures (failover, rollout) are printed (``pytest -s``)."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.e2e.test_run_flows import KUBECTL, kubectl

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
NS = "kubeflow-system"
DEPLOYMENT = "kubeflow-trainer-controller-manager"
LEASE = "trainer.kubeflow.org"
LEASE_SECONDS = 15  # the manifests' leaderElection.leaseDuration
READY = "no controller or webhook of its own"
FORBIDDEN = re.compile(r"\b403\b.*Forbidden|is forbidden: User")
DASHBOARD = re.compile(r"dashboard: (http://127\.0\.0\.1:\d+)/\?token=(\S+)  \(read-only")
WAITING = "waiting for the Kubeflow Trainer CRDs to be installed"
SERVED = "dashboard: the Kubeflow Trainer CRDs are served"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed"),
]

RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "rehearsal", "labels": {"trainer.kubeflow.org/framework": "torch"}},
    "spec": {
        "mlPolicy": {"numNodes": 1},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "node",
                                                "image": "python:3.11",
                                                "command": [PY, "-c", "print('trained')"],
                                            }
                                        ]
                                    }
                                }
                            },
                        },
                    }
                ]
            }
        },
    },
}


def trainjob(name: str, runtime: str = "rehearsal") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"runtimeRef": {"name": runtime}},
        }
    )


class Plane:
    """``trainer up --without-controller`` in a subprocess, its output kept."""

    def __init__(self, proc: asyncio.subprocess.Process, kubeconfig: Path) -> None:
        self.proc, self.kubeconfig = proc, kubeconfig
        self.lines: list[str] = []
        self.more = asyncio.Condition()
        self.reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            async with self.more:
                self.lines.append(raw.decode(errors="replace"))
                self.more.notify_all()
        async with self.more:
            self.more.notify_all()

    async def line(self, text: str, timeout: float) -> str:
        """The first output line holding ``text``, once it is printed (fails if the plane
        exits first)."""
        try:
            async with asyncio.timeout(timeout), self.more:
                while True:
                    found = next((line for line in self.lines if text in line), None)
                    if found is not None:
                        return found
                    if self.reader.done():
                        break
                    await self.more.wait()
        except TimeoutError:
            pytest.fail(f"{text!r} not printed within {timeout} s:\n{''.join(self.lines)}")
        pytest.fail(f"trainer up exited before {text!r}:\n{''.join(self.lines)}")

    async def dashboard(self, path: str) -> tuple[int, Any]:
        """GET ``path`` from the dashboard with its token: the status and JSON (or text)."""
        found = next(m for line in self.lines if (m := DASHBOARD.search(line)))
        base, token = found.groups()
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            aiohttp.ClientSession(headers=headers) as http,
            http.get(base + path, timeout=aiohttp.ClientTimeout(total=30)) as resp,
        ):
            if resp.content_type == "application/json":
                return resp.status, await resp.json()
            return resp.status, await resp.text()

    async def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 90) -> str:
        return await kubectl(self.kubeconfig, *args, stdin=stdin, timeout=timeout)

    async def attempt(self, *args: str, stdin: str | None = None) -> tuple[int, str]:
        """kubectl that may fail: its exit code and stderr + stdout."""
        assert KUBECTL is not None
        proc = await asyncio.create_subprocess_exec(
            KUBECTL,
            "--kubeconfig",
            str(self.kubeconfig),
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else None,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 60)
        return proc.returncode or 0, out.decode()

    async def get(self, *args: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(await self.kubectl("get", *args, "-o", "json"))
        return result

    async def holder(self) -> str:
        lease = await self.get("lease", "-n", NS, LEASE)
        return str(lease["spec"].get("holderIdentity") or "")

    async def wait_complete(self, *names: str) -> None:
        await self.kubectl(
            "wait",
            "--for=condition=Complete",
            *(f"trainjob/{n}" for n in names),
            "--timeout=90s",
            timeout=100,
        )

    def controller_lines(self) -> list[str]:
        return [line for line in self.lines if line.startswith(f"{DEPLOYMENT}-")]


async def until(check: Any, timeout: float, what: str) -> float:
    """Poll ``check`` (async, truthy when done) every 0.2 s; the seconds it took."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout:
            pytest.fail(f"{what}: not within {timeout} s")
        await asyncio.sleep(0.2)
    return time.monotonic() - started


async def start(tmp_path: Path) -> Plane:
    kubeconfig = tmp_path / "kubeconfig"
    proc = await asyncio.create_subprocess_exec(
        PY,
        *("-m", "trainer.cli.main", "up", "--without-controller"),  # the dashboard too
        *("--kubeconfig", str(kubeconfig)),
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    plane = Plane(proc, kubeconfig)
    await plane.line(READY, 60)
    await plane.line("dashboard: http://", 60)
    return plane


async def stop(plane: Plane) -> None:
    if plane.proc.returncode is None:
        plane.proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(plane.proc.wait(), 30)
    await plane.reader


async def test_the_standalone_install_runs_fails_over_and_rotates_its_certificate(
    tmp_path: Path,
) -> None:
    in_cluster_marker = Path("/var/run/secrets/kubernetes.io")
    existed = in_cluster_marker.exists()
    plane = await start(tmp_path)
    try:
        await dashboard_waits(plane)
        await install_and_train(plane)
        await dashboard_shows(plane)
        await fail_over(plane)
        await rotate_certificate(plane)
        refused = [line for line in plane.controller_lines() if FORBIDDEN.search(line)]
        assert not refused, "the controller was refused by RBAC:\n" + "".join(refused[:5])
        assert plane.controller_lines(), "no controller output was seen"
        # The pods' token was at the standard path in their mount namespaces only: this host
        # still looks like no pod to the programs run on it.
        assert in_cluster_marker.exists() == existed
        assert plane.proc.returncode is None, "".join(plane.lines)  # the plane stayed up
    finally:
        await stop(plane)
    assert plane.proc.returncode == 0, "".join(plane.lines[-30:])
    assert not [line for line in plane.lines if "internal error" in line]


async def dashboard_waits(plane: Plane) -> None:
    """Before the install the dashboard answers, saying it waits for the Trainer CRDs (only
    JobSet's are served) rather than failing (docs/dashboard.md, "What it watches")."""
    said = await plane.line(f"dashboard: {WAITING} (", 10)
    assert "trainjobs.trainer.kubeflow.org" in said
    status, info = await plane.dashboard("/api/info")
    assert status == 200 and info["waiting"].startswith(WAITING), info
    assert info["unavailable"] == {}  # JobSets and the rest are served
    assert await plane.dashboard("/api/trainjobs") == (200, [])
    status, page = await plane.dashboard("/")
    assert status == 200 and "<h1>TrainJobs</h1>" in page


async def dashboard_shows(plane: Plane) -> None:
    """Once the install is applied the same dashboard, not restarted, lists its TrainJobs and
    runtimes."""
    await plane.line(SERVED, 30)
    status, info = await plane.dashboard("/api/info")
    assert status == 200 and info["waiting"] is None and info["unavailable"] == {}, info
    status, rows = await plane.dashboard("/api/trainjobs")
    assert status == 200
    assert {(r["name"], r["state"]) for r in rows} >= {("first", "Complete")}, rows
    assert {r["name"] for r in rows} == {"first", "by-trainer-run"}, rows
    status, runtimes = await plane.dashboard("/api/runtimes")
    assert status == 200 and [r["name"] for r in runtimes] == ["rehearsal"], runtimes


async def install_and_train(plane: Plane) -> None:
    started = time.monotonic()
    await plane.kubectl(
        "apply", "--server-side", "-k", str(ROOT / "manifests" / "overlays" / "standalone")
    )
    await plane.kubectl(
        "rollout", "status", f"deployment/{DEPLOYMENT}", "-n", NS, "--timeout=120s", timeout=130
    )
    print(f"\ninstall: Deployment available {time.monotonic() - started:.1f} s after apply")
    deployment = await plane.get("deployment", "-n", NS, DEPLOYMENT)
    assert deployment["status"]["availableReplicas"] == 2
    selector = f"kubernetes.io/service-name={DEPLOYMENT}"
    slices = await plane.get("endpointslices", "-n", NS, "-l", selector)
    (slice_,) = slices["items"]
    ports = {p["name"]: p["port"] for p in slice_["ports"]}
    assert ports == {"webhook": 9443, "metrics": 8443, "status-server": 10443}
    assert [e["conditions"]["ready"] for e in slice_["endpoints"]] == [True, True]
    # The runtime passes through the deployed validating webhook (it is not labelled to skip).
    await plane.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump(RUNTIME))
    await plane.kubectl("create", "-f", "-", stdin=trainjob("first"))
    await plane.wait_complete("first")
    code, out = await plane.attempt("create", "-f", "-", stdin=trainjob("refused", "missing"))
    assert code != 0
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in out
    assert 'ClusterTrainingRuntime.trainer.kubeflow.org "missing" not found' in out
    runtimes, status = await asyncio.to_thread(sdk_view, plane.kubeconfig, "first")
    assert "rehearsal" in runtimes and status == "Complete"
    await trainer_run_against(plane)


async def trainer_run_against(plane: Plane) -> None:
    """``trainer run --kubeconfig`` on the plane: created there, followed to Complete, its
    pod's log printed under the pod's name."""
    job = plane.kubeconfig.parent / "by-trainer-run.yaml"
    job.write_text(trainjob("by-trainer-run"))
    proc = await asyncio.create_subprocess_exec(
        *(PY, "-m", "trainer.cli.main", "run", "--kubeconfig", str(plane.kubeconfig)),
        *("-f", str(job), "--timeout", "90"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out = (await asyncio.wait_for(proc.communicate(), 120))[0].decode()
    assert proc.returncode == 0, out
    assert "TrainJob default/by-trainer-run: Complete" in out, out
    assert re.search(r"^by-trainer-run-node-0-0-\w+ \| trained$", out, re.MULTILINE), out


def sdk_view(kubeconfig: Path, job: str) -> tuple[list[str], str]:
    """What the Kubeflow SDK's TrainerClient sees of the install: runtimes and a job's status."""
    pytest.importorskip("kubeflow", reason="needs the Kubeflow SDK (installed by .[dev])")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # kubeflow 0.5's pydantic models
        from kubeflow.common.types import KubernetesBackendConfig  # noqa: PLC0415
        from kubeflow.trainer import TrainerClient  # noqa: PLC0415

    client = TrainerClient(KubernetesBackendConfig(config_file=str(kubeconfig)))
    return [r.name for r in client.list_runtimes()], str(client.get_job(job).status)


async def fail_over(plane: Plane) -> None:
    leader = await plane.holder()
    pod = leader.split("_", 1)[0]
    started = time.monotonic()
    await plane.kubectl("delete", "pod", "-n", NS, pod, "--wait=false")
    names = [f"during-{i}" for i in range(3)]
    for name in names:  # created while the Lease changes hands
        await plane.kubectl("create", "-f", "-", stdin=trainjob(name))

    async def new_leader() -> bool:
        holder = await plane.holder()
        return bool(holder) and holder != leader

    await until(new_leader, 2 * LEASE_SECONDS, "a new leader")
    failover = time.monotonic() - started
    print(f"failover: new leader {failover:.1f} s after the leader's pod was deleted")
    assert failover < LEASE_SECONDS
    await plane.wait_complete("first", *names)
    jobsets = await plane.get("jobsets", "-n", "default")
    owners = [js["metadata"]["ownerReferences"][0]["name"] for js in jobsets["items"]]
    # One JobSet each, none twice.
    assert sorted(owners) == sorted(["first", "by-trainer-run", *names])

    async def replaced() -> bool:
        deployment = await plane.get("deployment", "-n", NS, DEPLOYMENT)
        return int(deployment["status"].get("availableReplicas") or 0) == 2

    await until(replaced, 60, "the deleted pod replaced")


async def rotate_certificate(plane: Plane) -> None:
    before = await ca_bundle(plane)
    started = time.monotonic()
    await plane.kubectl("delete", "secret", "-n", NS, "kubeflow-trainer-webhook-cert")
    await plane.kubectl("rollout", "restart", f"deployment/{DEPLOYMENT}", "-n", NS)
    await plane.kubectl(
        "rollout", "status", f"deployment/{DEPLOYMENT}", "-n", NS, "--timeout=120s", timeout=130
    )
    print(f"rotation: rollout with a new certificate done in {time.monotonic() - started:.1f} s")
    after = await ca_bundle(plane)
    assert after != before
    assert b"BEGIN CERTIFICATE" in base64.b64decode(after)
    sets = await plane.get("replicasets", "-n", NS)
    assert sorted(rs["spec"]["replicas"] for rs in sets["items"]) == [0, 2]
    await plane.kubectl("create", "-f", "-", stdin=trainjob("after-rotation"))
    await plane.wait_complete("after-rotation")
    code, out = await plane.attempt("create", "-f", "-", stdin=trainjob("refused", "missing"))
    assert code != 0 and "denied the request" in out, out
    await reach_the_service_by_name(plane, base64.b64decode(after).decode())


CLIENT = """
import os, socket, ssl
host = "kubeflow-trainer-controller-manager.kubeflow-system.svc"
context = ssl.create_default_context(cadata=os.environ["CA"])
with socket.create_connection((host, 443), timeout=10) as raw:
    with context.wrap_socket(raw, server_hostname=host) as tls:
        print("reached", host, "at", tls.getpeername()[0], tls.version())
"""


async def reach_the_service_by_name(plane: Plane, ca: str) -> None:
    """A pod of another namespace reaches the webhook Service by its DNS name from its own
    sandbox, and the certificate it is served is the Service's, under the new CA."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "client", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "client",
                    "image": "python:3.11",
                    "command": [PY, "-c", CLIENT],
                    "env": [{"name": "CA", "value": ca}],
                }
            ],
        },
    }
    await plane.kubectl("create", "-f", "-", stdin=yaml.safe_dump(pod))
    await plane.kubectl(
        "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/client", "--timeout=60s"
    )
    out = await plane.kubectl("logs", "client")
    assert out.startswith(
        "reached kubeflow-trainer-controller-manager.kubeflow-system.svc at 127.96."
    ), out


async def ca_bundle(plane: Plane) -> str:
    config = await plane.get("validatingwebhookconfiguration", "validator.trainer.kubeflow.org")
    bundles = {h["clientConfig"].get("caBundle", "") for h in config["webhooks"]}
    (bundle,) = bundles
    return str(bundle)
