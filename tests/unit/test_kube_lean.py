"""``trainer.kube.lean``: kubernetes_asyncio without its generated API and model classes, in a
fresh interpreter (the only place it can be installed), still builds clients from a
kubeconfig; installed too late, it refuses and changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LEAN = """
import asyncio, sys
from trainer.kube.lean import import_lean
assert import_lean()
assert not import_lean()  # once only
from trainer.kube.client import new_api_client
from trainer.kube.rest import Kube
loaded = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.")]
assert "kubernetes_asyncio.client.api.core_v1_api" not in sys.modules, loaded
assert not any(m.startswith("kubernetes_asyncio.client.models.") for m in loaded), loaded
api = asyncio.run(new_api_client(sys.argv[1]))
print(api.configuration.host, type(Kube(api)).__name__)
"""

LATE = """
import kubernetes_asyncio.client
from trainer.kube.lean import import_lean
assert not import_lean()
assert hasattr(kubernetes_asyncio.client, "CoreV1Api")
print("refused")
"""

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def run(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_lean_import_builds_a_client_without_the_generated_classes(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    assert run(LEAN, str(kubeconfig)) == "https://127.0.0.1:6443 Kube"


def test_too_late_it_refuses_and_changes_nothing() -> None:
    assert run(LATE) == "refused"
