"""The dashboard in a real browser: headless Chromium (Debian's) driven by Playwright, against
``trainer up --feature-gates TrainJobStatus=true --dashboard-allow-actions``.

What a person sees is asserted: the TrainJob's row appears and goes Running then Complete,
its progress bar moves as the training code reports, the metric charts gain points, the log
panel shows the training output, a failing TrainJob shows its reason, suspend and resume work
from the buttons, HTML in an annotation shows as text, and requests without the token, from a
foreign Host or without the CSRF token are refused, as is the session cookie replayed by the
server on another loopback port that the browser handed it to; under ``--without-controller``
the page says it waits for the Trainer CRDs until they are applied. The training code advances
when the test creates a gate file, so nothing waits on a timer.

With ``TRAINER_DASHBOARD_SCREENSHOTS=docs/images`` the run saves screenshots of the main pages
there (docs/dashboard.md shows them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
CHROMIUM = "/usr/bin/chromium"
KUBECTL = shutil.which("kubectl")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 45_000
SHOTS = os.environ.get("TRAINER_DASHBOARD_SCREENSHOTS")

pytestmark = pytest.mark.slow

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - the dev extra installs it
    pytest.skip("playwright is not installed (pip install -e '.[dev]')", allow_module_level=True)
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(
        f"{CHROMIUM} is missing (hack/system-packages.sh installs Debian's chromium)",
        allow_module_level=True,
    )
if KUBECTL is None:
    pytest.skip("kubectl is not installed", allow_module_level=True)

TRAIN = """
import datetime, json, os, ssl, sys, time, urllib.request
gate = os.environ["GATE"]
def report(pct, eta, **metrics):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {"trainerStatus": {"progressPercentage": pct, "estimatedRemainingSeconds": eta,
            "metrics": [{"name": k, "value": str(v)} for k, v in metrics.items()],
            "lastUpdatedTime": now}}
    token = open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read()
    ctx = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
    req = urllib.request.Request(os.environ["KUBEFLOW_TRAINER_SERVER_URL"],
        json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    urllib.request.urlopen(req, context=ctx).close()
def wait(step):
    while not os.path.exists(os.path.join(gate, str(step))):
        time.sleep(0.05)
print("epoch 1 loss 0.90", flush=True)
report(10, 90, loss=0.9, accuracy=0.31)
wait(1)
print("epoch 2 loss 0.50", flush=True)
report(60, 40, loss=0.5, accuracy=0.62)
wait(2)
report(100, 0, loss=0.2, accuracy=0.91)
print("training finished", flush=True)
"""


def trainjob(name: str, command: list[str], **extra: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default", **extra.pop("metadata", {})},
        "spec": {
            "runtimeRef": {"name": "torch-local-cpu"},
            "trainer": {"command": command, **extra.pop("trainer", {})},
        },
    }
    return job


class Plane:
    def __init__(self, tmp: Path, *options: str) -> None:
        """``trainer up OPTIONS``; by default the module's plane: the status server, actions."""
        self.tmp = tmp
        self.kubeconfig = tmp / "kubeconfig"
        options = options or ("--feature-gates", "TrainJobStatus=true", "--dashboard-allow-actions")
        self.proc = subprocess.Popen(
            [PY, "-m", "trainer.cli.main", "up", "--kubeconfig", str(self.kubeconfig), *options],
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert self.proc.stdout is not None
        seen = []
        deadline = time.monotonic() + 60
        self.url = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"dashboard: (http://\S+)", line)
            if found:
                self.url = found.group(1)
                break
        if not self.url:
            self.stop()
            pytest.fail("trainer up printed no dashboard URL:\n" + "".join(seen))
        self.base = self.url.split("/?token=")[0]

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        assert KUBECTL is not None
        proc = subprocess.run(
            [KUBECTL, "--kubeconfig", str(self.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl("create", "-f", "-", stdin=json.dumps(obj))

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plane]:
    p = Plane(tmp_path_factory.mktemp("dashboard"))
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def errors() -> list[str]:
    """What the page reported as errors; the test fails unless it is empty at the end."""
    return []


@pytest.fixture
def page(browser: Browser, plane: Plane, errors: list[str]) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    # Console errors include Content-Security-Policy violations and failed loads.
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    pg.on("dialog", lambda dialog: dialog.accept())  # the actions' confirmations
    pg.set_default_timeout(WAIT_MS)
    pg.goto(plane.url)  # the token becomes a session cookie
    try:
        yield pg
    finally:
        context.close()
    assert not errors, errors


def shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / name), full_page=True)


def row(page: Page, name: str) -> Any:
    return page.locator(f'#trainjobs tr[data-key="default/{name}"]')


def test_a_training_job_live_progress_charts_and_logs(plane: Plane, page: Page) -> None:
    gate = plane.tmp / "gate"
    gate.mkdir()
    job = trainjob(
        "demo",
        [PY, "-c", TRAIN],
        trainer={"env": [{"name": "GATE", "value": str(gate)}]},
        metadata={"annotations": {"note": "<b>bold</b><img src=x onerror=alert(1)>"}},
    )
    assert page.url == plane.base + "/", "the token was not swapped for a cookie"
    # The node, then its pod counted in its allocation once bound, without a reload.
    page.goto(plane.base + "/nodes")
    local = page.locator('#nodes tr[data-node="local"]')
    expect(local).to_have_attribute("data-ready", "Ready")
    expect(local.locator('td[data-resource="pods"]')).to_contain_text("0 of 110 requested")
    plane.apply(job)
    expect(local.locator('td[data-resource="pods"]')).to_contain_text("1 of 110 requested")
    expect(local.locator('td[data-resource="cpu"]')).to_contain_text("free")
    shot(page, "dashboard-nodes.png")
    page.goto(plane.base + "/")
    demo = row(page, "demo")
    expect(demo).to_have_attribute("data-state", "Running")
    expect(demo.locator("[role=progressbar]")).to_have_attribute("aria-valuenow", "10")
    (gate / "1").touch()
    bar = demo.locator("[role=progressbar]")
    expect(bar).to_have_attribute("aria-valuenow", "60")  # moved, without a reload
    assert bar.locator(".fill").evaluate("e => e.style.width") == "60%"
    expect(demo.locator(".eta")).to_contain_text("ETA")

    demo.locator("a").click()
    expect(page.locator("#state [data-state]")).to_have_text("Running")
    expect(page.locator('#charts svg[data-metric="loss"] circle')).to_have_count(2)
    expect(page.locator('#charts svg[data-metric="progress"] circle')).to_have_count(2)
    page.locator("#pods button", has_text="node").first.click()
    expect(page.locator("#log")).to_contain_text("epoch 2 loss 0.50")
    shot(page, "dashboard-trainjob-running.png")
    (gate / "2").touch()
    expect(page.locator("#state [data-state]")).to_have_text("Complete")
    expect(page.locator('#charts svg[data-metric="loss"] circle')).to_have_count(3)
    page.locator("#log-scale").check()
    expect(page.locator('#charts svg[data-metric="loss"]')).to_have_attribute("data-scale", "log")
    expect(page.locator('#charts svg[data-metric="loss"] circle')).to_have_count(3)
    page.locator("#log-scale").uncheck()
    expect(page.locator("#log")).to_contain_text("training finished")  # followed
    expect(page.locator("#conditions")).to_contain_text("Complete")
    expect(page.locator("#steps tbody tr")).to_contain_text("node")
    expect(page.locator("#events")).to_contain_text("Started")
    # HTML in an annotation is text in the YAML, never markup.
    expect(page.locator("#trainjob-yaml")).to_contain_text("<b>bold</b><img src=x")
    assert page.locator("#trainjob-yaml b, #trainjob-yaml img").count() == 0
    page.locator("summary", has_text="TrainJob").click()
    shot(page, "dashboard-trainjob.png")

    page.goto(plane.base + "/")
    expect(row(page, "demo")).to_have_attribute("data-state", "Complete")
    page.goto(plane.base + "/runtimes")
    expect(page.locator("#runtimes")).to_contain_text("torch-local-cpu")
    shot(page, "dashboard-runtimes.png")


def test_a_failing_job_shows_its_reason_and_a_queued_one_its_queue(
    plane: Plane, page: Page
) -> None:
    plane.apply(trainjob("broken", [PY, "-c", "import sys; print('oops'); sys.exit(3)"]))
    queued = trainjob("queued", [PY, "-c", "print('never')"])
    queued["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    queued["spec"]["suspend"] = True
    plane.apply(queued)
    broken = row(page, "broken")
    expect(broken).to_have_attribute("data-state", "Failed")
    expect(broken.locator(".detail")).to_contain_text("FailedJobs")
    expect(row(page, "queued")).to_have_attribute("data-state", "Suspended")
    expect(row(page, "queued").locator(".detail")).to_have_text("queued by Kueue in team-a")
    page.select_option("#filter-state", "Failed")
    expect(page.locator("#trainjobs tbody tr:visible")).to_have_count(1)
    page.select_option("#filter-state", "")
    shot(page, "dashboard-trainjobs.png")
    broken.locator("a").click()
    expect(page.locator("#state-detail")).to_contain_text("first failed job: broken-node-0")
    # ... and why: the first failed container, its exit code and its last output.
    expect(page.locator("#state-detail")).to_contain_text(
        "first failure: replicated job node, node index 0, pod broken-node-0-0-"
    )
    expect(page.locator("#state-detail")).to_contain_text("exited with code 3 (Error)")
    expect(page.locator("#state-detail")).to_contain_text("last output:\noops")
    expect(page.locator("#state-detail")).to_have_class(re.compile(r"\bfailure\b"))
    # The failed Job's pods are gone by now; their story is in the merged events ...
    expect(page.locator("#events")).to_contain_text("BackoffLimitExceeded")
    expect(page.locator("#conditions")).to_contain_text("FailedJobs")
    # ... and in the pods the Job controller deleted, still listed with their last state and
    # the log the local plane kept of them.
    gone = page.locator("#pods tbody tr", has=page.locator(".badge-deleted")).first
    expect(gone.locator(".badge-deleted")).to_have_text("deleted")
    expect(gone.locator(".reasons")).to_contain_text("Error (exit code 3)")
    gone.get_by_role("button", name="node", exact=True).click()
    expect(page.locator("#log")).to_have_text("oops\n")
    expect(page.locator("#log-target")).to_contain_text("deleted pod")


def test_suspend_and_resume_from_the_buttons(plane: Plane, page: Page) -> None:
    gate = plane.tmp / "gate-pause"
    gate.mkdir()
    job = trainjob(
        "pausable", [PY, "-c", TRAIN], trainer={"env": [{"name": "GATE", "value": str(gate)}]}
    )
    plane.apply(job)
    page.goto(plane.base + "/trainjobs/default/pausable")
    expect(page.locator("#state [data-state]")).to_have_text("Running")
    page.locator("#action-suspend").click()
    expect(page.locator("#state [data-state]")).to_have_text("Suspended")
    expect(page.locator("#action-result")).to_have_text("suspend: done")
    assert json.loads(plane.kubectl("get", "trainjob", "pausable", "-o", "json"))["spec"]["suspend"]
    page.locator("#action-resume").click()
    expect(page.locator("#state [data-state]")).to_have_text("Running")
    (gate / "1").touch()
    (gate / "2").touch()
    expect(page.locator("#state [data-state]")).to_have_text("Complete")
    page.locator("#action-delete").click()
    expect(page.locator("#state")).to_have_text("Deleted")
    page.goto(plane.base + "/")
    expect(row(page, "demo")).to_have_count(1)
    expect(row(page, "pausable")).to_have_count(0)


def test_the_page_waits_for_the_trainer_crds_then_shows_the_trainjobs(
    tmp_path: Path, browser: Browser
) -> None:
    """``trainer up --without-controller`` before the install is applied (docs/install.md): the
    TrainJobs page says it waits for the Trainer CRDs; once they are applied the note goes and
    a TrainJob created then shows, without a reload."""
    bare = Plane(tmp_path, "--without-controller")
    context = browser.new_context()
    errors: list[str] = []
    try:
        pg = context.new_page()
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        pg.set_default_timeout(WAIT_MS)
        pg.goto(bare.url)
        waiting = pg.locator("#waiting")
        expect(waiting).to_be_visible()
        expect(waiting).to_contain_text("Waiting for the Kubeflow Trainer CRDs to be installed")
        expect(pg.locator("#empty")).to_be_visible()
        expect(pg.locator("#unavailable")).to_be_hidden()
        bare.kubectl("apply", "--server-side", "-k", str(ROOT / "manifests" / "base" / "crds"))
        expect(waiting).to_be_hidden()
        bare.apply(trainjob("waited", [PY, "-c", "pass"]))
        expect(row(pg, "waited")).to_have_attribute("data-state", "Created")
    finally:
        context.close()
        bare.stop()
    assert not errors, errors


def _status(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> int:
    req = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_token_host_and_csrf_refusals(plane: Plane, page: Page, errors: list[str]) -> None:
    assert _status(plane.base + "/") == 403  # no token, no cookie
    assert _status(plane.base + "/?token=wrong") == 403
    host = plane.base.split("//")[1]
    assert _status(plane.url, {"Host": "evil.example:" + host.split(":")[1]}) == 403
    # The browser has a session; a POST without the page's CSRF token is refused.
    refused = page.request.post(plane.base + "/api/trainjobs/default/demo/suspend")
    assert refused.status == 403 and "CSRF" in refused.text()
    page.goto(plane.base + "/nope")
    expect(page.locator("h1")).to_have_text("Not found")
    assert errors == [
        "Failed to load resource: the server responded with a status of 404 (Not Found)"
    ]
    errors.clear()


RETRYING_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainingRuntime",
    "metadata": {
        "name": "retrying",
        "namespace": "default",
        "labels": {"trainer.kubeflow.org/framework": "torch"},
        "annotations": {"example.com/deprecation": "<i>use torch-local-cpu</i>"},
    },
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
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
                                "backoffLimit": 2,
                                "template": {
                                    "spec": {
                                        "restartPolicy": "OnFailure",
                                        "containers": [{"name": "node", "image": "python:3.11"}],
                                    }
                                },
                            },
                        },
                    }
                ]
            }
        },
    },
}


def test_a_restarted_container_shows_its_previous_log(
    plane: Plane, page: Page, tmp_path: Path
) -> None:
    marker = tmp_path / "ran-once"
    code = (
        f"import os, sys; m = {str(marker)!r}; again = os.path.exists(m); "
        "print('second run' if again else 'first run', flush=True); "
        "open(m, 'w').close(); sys.exit(0 if again else 1)"
    )
    plane.apply(RETRYING_RUNTIME)
    job = trainjob("retried", [PY, "-c", code])
    job["spec"]["runtimeRef"] = {"name": "retrying", "kind": "TrainingRuntime"}
    plane.apply(job)
    page.goto(plane.base + "/trainjobs/default/retried")
    # A failed run, a restart back-off and a second run: more than Playwright's default 5 s on
    # a loaded CI machine (it once ended there, still Running).
    expect(page.locator("#state [data-state]")).to_have_text("Complete", timeout=30_000)
    pod = page.locator("#pods tbody tr")
    expect(pod.locator("td").nth(3)).to_have_text("1")  # restarts
    expect(pod.locator(".reasons")).to_contain_text("node: previously Error (exit code 1)")
    pod.get_by_role("button", name="node (previous)").click()
    expect(page.locator("#log")).to_have_text("first run\n")
    pod.get_by_role("button", name="node", exact=True).click()
    expect(page.locator("#log")).to_have_text("second run\n")
    # The runtime's annotation holds HTML: the server-rendered page shows it as text.
    page.goto(plane.base + "/runtimes")
    row = page.locator("#runtimes tr", has_text="default/retrying")
    expect(row.locator(".deprecated")).to_have_text(
        "example.com/deprecation: <i>use torch-local-cpu</i>"
    )
    assert row.locator(".deprecated i").count() == 0


# Another user's web server on another loopback port: it answers one request and prints the
# Cookie header the browser sent with it.
COOKIE_CATCHER = r"""
import http.server
class Catch(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print("cookie:", self.headers.get("Cookie", ""), flush=True)
        body = b"<!doctype html><link rel='icon' href='data:,'><title>elsewhere</title>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Catch)
print("port:", server.server_address[1], flush=True)
server.handle_request()
"""


def test_the_cookie_another_port_receives_reads_and_does_nothing(plane: Plane, page: Page) -> None:
    """Browsers send 127.0.0.1's cookies to every port of 127.0.0.1: the dashboard's session
    cookie reaches another user's server. Replayed, it opens only the page skeleton: the data,
    the event streams and the actions need the session key that only the page holds."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the other port's server as a second user")
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    catcher = subprocess.Popen(
        [*nobody, PY, "-I", "-c", COOKIE_CATCHER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert catcher.stdout is not None
        port = int(catcher.stdout.readline().split()[1])
        page.goto(f"http://127.0.0.1:{port}/")
        cookie = catcher.stdout.readline().split("cookie:", 1)[1].strip()
    finally:
        catcher.kill()
        catcher.wait()
    assert "trainer-dashboard-" in cookie  # the browser did hand it over
    replay = {"Cookie": cookie}
    for path, method in [
        ("/api/trainjobs", "GET"),
        ("/api/trainjobs/default/broken", "GET"),
        ("/api/stream", "GET"),
        ("/api/runtimes", "GET"),
        ("/api/nodes", "GET"),
        ("/api/stream/nodes", "GET"),
        ("/api/trainjobs/default/queued/resume", "POST"),
    ]:
        assert _status(plane.base + path, replay, method) == 403, path
    req = urllib.request.Request(plane.base + "/", headers=replay)
    with urllib.request.urlopen(req, timeout=10) as resp:
        skeleton = resp.read().decode()
    assert "TrainJobs" in skeleton
    assert "broken" not in skeleton and "queued" not in skeleton  # no cluster data
    assert json.loads(plane.kubectl("get", "trainjob", "queued", "-o", "json"))["spec"]["suspend"]
