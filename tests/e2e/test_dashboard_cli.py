"""``trainer dashboard`` as a user runs it against a cluster (here ``trainer apiserver``, the
API server alone): it prints a URL with a token, shows the namespace it was given, is
read-only without ``--allow-actions``, stops on SIGTERM with status 0, and refuses bad flags,
unusable kubeconfigs and credentials the API server rejects with one line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from trainer.cli.dashboard import address_warning
from trainer.cli.main import app
from trainer.kube.client import new_api_client
from trainer.kube.rest import Kube

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
KUBECTL = shutil.which("kubectl")
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
runner = CliRunner()


def in_process(*args: str) -> tuple[int, str]:
    """``trainer dashboard ARGS`` in this process, for the runs that end at once."""
    result = runner.invoke(app, ["dashboard", *args])
    return result.exit_code, result.stderr


def trainer(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, "-m", "trainer.cli.main", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
    )


def wait_for(proc: subprocess.Popen[str], pattern: str) -> re.Match[str]:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        found = re.search(pattern, line)
        if found:
            return found
    raise AssertionError(f"exited {proc.wait()} before {pattern!r}:\n{''.join(seen)}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A running API server with a TrainJob in ``default`` and one in ``team``."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    kubeconfig = tmp_path_factory.mktemp("dash") / "kubeconfig"
    server = trainer("apiserver", "--port", "0", "--kubeconfig", str(kubeconfig))
    try:
        wait_for(server, "kubeconfig written")
        for ns, name in (("default", "mine"), ("team", "theirs")):
            job = {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"runtimeRef": {"name": "torch-distributed"}},
            }
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            subprocess.run(
                [KUBECTL, "--kubeconfig", str(kubeconfig), "apply", "-f", "-"],
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": [namespace, job]}),
                text=True,
                check=True,
                capture_output=True,
                timeout=60,
            )
        yield kubeconfig
    finally:
        server.terminate()
        server.wait(30)


def get(url: str, headers: dict[str, str], method: str = "GET") -> tuple[int, Any]:
    req = urllib.request.Request(url, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_one_namespace_read_only_and_a_clean_stop(cluster: Path) -> None:
    proc = trainer("dashboard", "--kubeconfig", str(cluster), "-n", "team")
    try:
        url = wait_for(
            proc, r"dashboard: (http://127\.0\.0\.1:\d+/\?token=\S+)  \(read-only"
        ).group(1)
        base, token = url.split("/?token=")
        # The command re-executed itself as the lean process (same pid).
        assert "trainer.cli.dashboard_main" in Path(f"/proc/{proc.pid}/cmdline").read_text()
        auth = {"Authorization": f"Bearer {token}"}
        status, rows = get(base + "/api/trainjobs", auth)
        assert status == 200 and [(r["namespace"], r["name"]) for r in rows] == [("team", "theirs")]
        assert rows[0]["state"] == "Created" and rows[0]["runtime"] == "torch-distributed"
        status, body = get(base + "/api/trainjobs/team/theirs/suspend", auth, "POST")
        assert status == 403 and "--allow-actions" in body
        status, body = get(base + "/api/trainjobs/default/mine", auth)
        assert status == 404 and "not found" in body
        status, body = get(base + "/", {"Host": "attacker.example"})
        assert status == 403 and "not allowed" in body
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "Traceback" not in out


def test_credentials_the_api_server_rejects(cluster: Path, tmp_path: Path) -> None:
    config = yaml.safe_load(cluster.read_text())
    config["users"][0]["user"] = {"token": "not-the-token"}
    bad = tmp_path / "kubeconfig"
    bad.write_text(yaml.safe_dump(config))
    code, err = in_process("--kubeconfig", str(bad))
    assert code == 1, err
    assert err.startswith("error: cannot list TrainJobs with this kubeconfig: 401")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "a", "-A"], "error: --namespace and --all-namespaces exclude each other"),
        (["--port", "70000"], "error: --port 70000: must be 0..65535"),
        (["--kubeconfig", "/nonexistent/kc"], "error: kubeconfig /nonexistent/kc: cannot read"),
    ],
)
def test_bad_options_exit_2_with_one_line(args: list[str], message: str) -> None:
    code, err = in_process(*args)
    assert code == 2, err
    assert err.startswith(message) and len(err.splitlines()) == 1


def test_an_unknown_context_is_named(cluster: Path) -> None:
    code, err = in_process("--kubeconfig", str(cluster), "--context", "nope")
    assert code == 2 and "nope" in err, err
    assert err.startswith(f"error: kubeconfig {cluster}")


def test_listening_beyond_loopback_warns() -> None:
    assert address_warning("127.0.0.1") is None and address_warning("::1") is None
    warning = address_warning("0.0.0.0")
    assert warning is not None and "not only on this machine" in warning


def first_event(url: str, headers: dict[str, str]) -> tuple[str, Any]:
    """The first event of a server-sent event stream: (event, data)."""
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        event, data = "", ""
        for raw in resp:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = line.removeprefix("data: ")
            elif not line and event:
                return event, json.loads(data)
    raise AssertionError(f"{url}: the stream ended before an event")


def test_trainer_run_serves_the_dashboard_while_its_jobs_run(tmp_path: Path) -> None:
    """Also its Nodes view: the node of ``--node-config`` (4 fake GPUs), one taken by the pod."""
    gate = tmp_path / "gate"
    wait = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "watched"},
        "spec": {
            "runtimeRef": {"name": "torch-local-cpu"},
            "trainer": {
                "command": [PY, "-c", wait + "print('trained')"],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}},
            },
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    node_config = tmp_path / "node.yaml"
    node_config.write_text(yaml.safe_dump({"gpus": [{"product": "NVIDIA H100", "count": 4}]}))
    proc = trainer(
        "run", "-f", str(path), "--dashboard", "--timeout", "60", "--node-config", str(node_config)
    )
    try:
        url = wait_for(
            proc, r"dashboard: (http://127\.0\.0\.1:\d+/\?token=\S+)  \(read-only"
        ).group(1)
        wait_for(proc, r"TrainJob default/watched: Running")
        base, token = url.split("/?token=")
        auth = {"Authorization": f"Bearer {token}"}
        status, rows = get(base + "/api/trainjobs", auth)
        assert status == 200 and [(r["name"], r["state"]) for r in rows] == [("watched", "Running")]
        event, view = first_event(base + "/api/stream/nodes", auth)
        assert event == "nodes" and view["podsKnown"] and view["pending"] is None
        (node,) = view["nodes"]
        assert (node["name"], node["ready"], node["gpuProduct"]) == (
            "local",
            "Ready",
            "NVIDIA-H100",
        )
        gpus = {u["name"]: u for u in node["resources"]}["nvidia.com/gpu"]
        assert (gpus["allocatable"], gpus["requests"], gpus["free"]) == (4, 1, 3)
        assert gpus["text"] == {"allocatable": "4", "requests": "1", "limits": "1", "free": "3"}
        gate.touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    assert "TrainJob default/watched: Complete" in out


async def mint_token(kubeconfig: Path, namespace: str, account: str) -> str:
    """A service-account token from TokenRequest, sent as JSON (`kubectl create token`
    sends protobuf, which the local API server does not decode for this kind)."""
    api = await new_api_client(str(kubeconfig))
    try:
        answer = await Kube(api).request(
            "create",
            "serviceaccounts/token",
            "POST",
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
        )
    finally:
        await api.close()
    return str(answer["status"]["token"])


def test_a_user_who_may_only_read_trainjobs(cluster: Path, tmp_path: Path) -> None:
    """A service account with a Role on TrainJobs alone: the dashboard starts, names what it
    cannot list, and shows the TrainJobs."""
    assert KUBECTL is not None
    rbac = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "viewer"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "trainjob-viewer"},
            "rules": [
                {
                    "apiGroups": ["trainer.kubeflow.org"],
                    "resources": ["trainjobs"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "viewer"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "trainjob-viewer",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": "team"}],
        },
    ]
    base = [KUBECTL, "--kubeconfig", str(cluster), "-n", "team"]
    subprocess.run(
        [*base, "apply", "-f", "-"],
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac}),
        text=True,
        check=True,
        capture_output=True,
        timeout=60,
    )
    token = asyncio.run(mint_token(cluster, "team", "viewer"))
    config = yaml.safe_load(cluster.read_text())
    config["users"][0]["user"] = {"token": token}
    viewer = tmp_path / "viewer.kubeconfig"
    viewer.write_text(yaml.safe_dump(config))
    proc = trainer("dashboard", "--kubeconfig", str(viewer), "-n", "team")
    try:
        assert proc.stdout is not None
        warnings = []
        for line in proc.stdout:
            if line.startswith("warning:"):
                warnings.append(line.strip())
            if line.startswith("dashboard:"):
                url = line.split()[1]
                break
        else:
            raise AssertionError(f"exited {proc.wait()}: {warnings}")
        assert "warning: the dashboard cannot list pods (403 Forbidden): not shown" in warnings
        assert any(w.startswith("warning: the dashboard cannot list events") for w in warnings)
        # Nodes are cluster-scoped, and a node's allocation needs every namespace's pods.
        assert "warning: the dashboard cannot list nodes (403 Forbidden): not shown" in warnings
        assert (
            "warning: the dashboard cannot list pods in all namespaces (403 Forbidden): not shown"
            in warnings
        )
        page_base, secret = url.split("/?token=")
        auth = {"Authorization": f"Bearer {secret}"}
        status, rows = get(page_base + "/api/trainjobs", auth)
        assert status == 200 and [r["name"] for r in rows] == ["theirs"]
        status, view = get(page_base + "/api/nodes", auth)
        assert status == 200 and view["nodes"] == [] and view["podsKnown"] is False
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_trainer_up_with_a_busy_dashboard_port_stops_cleanly(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [
                PY,
                "-m",
                "trainer.cli.main",
                "up",
                "--kubeconfig",
                str(tmp_path / "kc"),
                "--dashboard-port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=ENV,
            check=False,
        )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == f"error: --dashboard-port {port}: Address already in use"
    assert "Traceback" not in done.stdout + done.stderr
