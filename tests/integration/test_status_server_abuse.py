"""Another user floods the status server with bad tokens; a real report still gets through
at once (docs/status-server.md, "One client cannot delay another").

The attacker is a second, unprivileged user (``setpriv --reuid=65534``) on the machine of a
local plane. It sends 150 bad tokens at once: half garbage of many shapes (refused before
any TokenReview), half well-formed service-account tokens for the TrainJob's audience and
namespace with a forged signature (these do reach TokenReview). Meanwhile the test, as the
plane's user, reports progress with a fresh token (so it needs a review too) and with one
reviewed before: each must be applied in under a second. Before the fix the shared review
budget (5 a second) put such a report 27 s back.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from trainer.api import constants as c
from trainer.cli.localplane import LocalPlane, start_local_plane

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and setpriv to run the attacker as a second user (uid 65534)",
)

NS, NAME = "default", "flooded"
AUD = f"trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{NAME}/status"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
REPORT = {
    "trainerStatus": {
        "progressPercentage": 42,
        "metrics": [{"name": "loss", "value": "0.5"}],
        "lastUpdatedTime": "2026-01-01T00:00:00Z",
    }
}

# Run by the attacker as ``python -I -c ATTACKER url namespace name``. It prints "flooding"
# once half its requests are answered (or 3 s have passed), then one JSON line: per request
# the kind of token, the answer's code and when the answer came (time.time()).
ATTACKER = r"""
import base64, concurrent.futures, http.client, json, os, ssl, sys, threading, time, uuid

url, ns, name = sys.argv[1:4]
host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
path = "/" + url.split("//")[1].split("/", 1)[1]
aud = f"trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs/{name}/status"

def b64(data):
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

def claims(**over):
    now = int(time.time())
    out = {
        "aud": [aud], "exp": now + 3600, "iat": now, "nbf": now, "jti": str(uuid.uuid4()),
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": f"system:serviceaccount:{ns}:default",
        "kubernetes.io": {
            "namespace": ns,
            "serviceaccount": {"name": "default", "uid": str(uuid.uuid4())},
            "pod": {"name": f"{name}-node-0-0", "uid": str(uuid.uuid4())},
        },
    }
    out.update(over)
    return out

def jwt(payload, alg="ES256", sig=None):
    header = {"alg": alg, "kid": b64(os.urandom(32)), "typ": "JWT"}
    return ".".join([b64(header), b64(payload), b64(sig or os.urandom(64))])

def garbage(i):
    shapes = [
        lambda: base64.urlsafe_b64encode(os.urandom(48)).decode(),
        lambda: ".".join(b64(os.urandom(24)) for _ in range(3)),
        lambda: f"a.{os.urandom(8).hex()}.c",
        lambda: jwt(claims(), alg="none", sig=b"x"),
        lambda: jwt(claims(), alg="HS256"),
        lambda: jwt(claims(aud=["https://kubernetes.default.svc.cluster.local"])),
        lambda: jwt(claims(exp=int(time.time()) - 3600)),
        lambda: jwt(claims(sub=f"user-{os.urandom(4).hex()}")),
        lambda: jwt(claims(sub="system:serviceaccount:elsewhere:default")),
        lambda: b64(os.urandom(2000)) + ".." + b64(os.urandom(16)),
    ]
    return shapes[i % len(shapes)]()

tokens = []
for i in range(75):
    tokens.append(("garbage", garbage(i)))
    tokens.append(("forged", jwt(claims())))

ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
body = json.dumps({"trainerStatus": {"progressPercentage": 99,
                                     "lastUpdatedTime": "2026-01-01T00:00:00Z"}})
results = []
lock = threading.Lock()
half = threading.Event()

def send(kind, token):
    try:
        conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
        conn.request("POST", path, body, {"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
        code = conn.getresponse().status
        conn.close()
    except Exception as exc:
        code = repr(exc)
    with lock:
        results.append((kind, code, time.time()))
        if len(results) >= len(tokens) // 2:
            half.set()

with concurrent.futures.ThreadPoolExecutor(max_workers=len(tokens)) as pool:
    for kind, token in tokens:
        pool.submit(send, kind, token)
    half.wait(3)
    print("flooding", flush=True)
print(json.dumps(results), flush=True)
"""


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[LocalPlane]:
    p = await start_local_plane(
        work_dir=tmp_path, state_dir=tmp_path / "state", feature_gates={"TrainJobStatus": True}
    )
    try:
        yield p
    finally:
        await p.close()


async def minted_token(plane: LocalPlane) -> str:
    answer = await plane.kube.request(
        "create",
        "serviceaccounts/token",
        "POST",
        f"/api/v1/namespaces/{NS}/serviceaccounts/default/token",
        body={"spec": {"audiences": [AUD], "expirationSeconds": 600}},
    )
    return str(answer["status"]["token"])


def report(url: str, ca: str, token: str) -> tuple[int, float]:
    """A pod's report (blocking, as training code sends it): the code (0: no answer within
    5 s) and the seconds taken."""
    request = urllib.request.Request(
        url,
        data=json.dumps(REPORT).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    context = ssl.create_default_context(cadata=ca)
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as answer:
            code = answer.status
    except urllib.error.HTTPError as exc:
        code = exc.code
    except TimeoutError:
        code = 0
    return code, time.perf_counter() - started


async def test_another_users_bad_tokens_do_not_delay_a_real_report(plane: LocalPlane) -> None:
    await plane.kube.create(
        {
            "apiVersion": c.API_VERSION,
            "kind": c.KIND_TRAINJOB,
            "metadata": {"name": NAME, "namespace": NS},
            "spec": {"runtimeRef": {"name": "torch-local-cpu"}, "suspend": True},
        }
    )
    secret = plane.server.storage.get_object(
        "v1", "secrets", "kubeflow-system", "kubeflow-trainer-webhook-cert"
    )
    assert secret is not None
    ca = base64.b64decode(secret["data"]["ca.crt"]).decode()
    port = plane.controller_state.status_server_port
    url = f"https://127.0.0.1:{port}/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}/trainjobs/{NAME}/status"
    reviewed, fresh = await minted_token(plane), await minted_token(plane)
    code, quiet = await asyncio.to_thread(report, url, ca, reviewed)
    assert code == 200

    attacker = await asyncio.create_subprocess_exec(
        *NOBODY, sys.executable, "-I", "-c", ATTACKER, url, NS, NAME,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert attacker.stdout is not None
    try:
        async with asyncio.timeout(20):
            assert await attacker.stdout.readline() == b"flooding\n"
        code_fresh, under_fire_fresh = await asyncio.to_thread(report, url, ca, fresh)
        code_cached, under_fire_cached = await asyncio.to_thread(report, url, ca, reviewed)
        reported = time.time()
        async with asyncio.timeout(60):
            out, err = await attacker.communicate()
    finally:
        if attacker.returncode is None:
            attacker.kill()
            await attacker.wait()
    assert attacker.returncode == 0, err.decode()[-2000:]

    print(
        f"report alone {quiet:.3f}s; under fire: fresh token {under_fire_fresh:.3f}s, "
        f"reviewed token {under_fire_cached:.3f}s"
    )
    assert (code_fresh, code_cached) == (200, 200)
    assert under_fire_fresh < 1.0 and under_fire_cached < 1.0

    answers: list[tuple[str, Any, float]] = json.loads(out)
    assert len(answers) == 150
    # Garbage is refused without a review; forged tokens are refused by the review, or told
    # to come back later when their client already has its share of reviews waiting.
    assert {code for kind, code, _ in answers if kind == "garbage"} == {403}
    forged = {code for kind, code, _ in answers if kind == "forged"}
    assert 403 in forged and forged <= {403, 429}
    # The reports were measured while the flood was still being worked through.
    assert any(kind == "forged" and at > reported for kind, _, at in answers)
    job = plane.server.storage.get_object(c.API_VERSION, c.PLURAL_TRAINJOBS, NS, NAME) or {}
    assert job["status"]["trainerStatus"] == REPORT["trainerStatus"]
