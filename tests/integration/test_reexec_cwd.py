"""No code from the working directory: the processes the plane re-executes from its own
modules (the webhook's review workers, ``trainer dashboard``'s lean process) import our code
even when started from a directory where another user planted packages of the same names
(trainer/machinery/pyexec.py).

The plant is made by a second, unprivileged user (``setpriv --reuid=65534``) in a
world-writable sticky directory, as in ``/tmp``; each planted module would leave a marker file
if it ran.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.asgi import asgi_request
from tests.integration.test_webhook_offload import NOW, lookup, review, trainjob
from webhooks.app import PATH_VALIDATE_TRAINJOB, create_app
from webhooks.offload import Offload

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
PLANTS = {
    "webhooks/__init__.py": "",
    "webhooks/worker.py": "",
    "trainer/__init__.py": "",
    "trainer/cli/__init__.py": "",
    "trainer/cli/dashboard_main.py": "",
}
PAYLOAD = "import pathlib; pathlib.Path({marker!r}).write_text('planted code ran')\n"


@pytest.fixture
def planted() -> Iterator[Path]:
    """A shared directory (mode 1777) holding another user's ``trainer`` and ``webhooks``."""
    shared = Path(tempfile.mkdtemp(prefix="shared-", dir="/tmp"))
    shared.chmod(0o1777)
    files = {
        rel: PAYLOAD.format(marker=str(shared / f"ran-{rel.replace('/', '.')}")) for rel in PLANTS
    }
    script = (
        "import pathlib, sys, json\n"
        "root = pathlib.Path(sys.argv[1])\n"
        "for rel, text in json.loads(sys.argv[2]).items():\n"
        "    (root / rel).parent.mkdir(parents=True, exist_ok=True)\n"
        "    (root / rel).write_text(text)\n"
    )
    as_other = os.geteuid() == 0 and shutil.which("setpriv") is not None
    prefix = NOBODY if as_other else []
    subprocess.run(
        [*prefix, sys.executable, "-I", "-c", script, str(shared), json.dumps(files)],
        check=True,
        timeout=30,
    )
    if as_other:
        assert (shared / "webhooks/worker.py").stat().st_uid == 65534
    try:
        yield shared
    finally:
        shutil.rmtree(shared)


def ran(shared: Path) -> list[str]:
    return sorted(p.name for p in shared.glob("ran-*"))


def test_trainer_dashboard_started_in_a_shared_directory_runs_our_lean_process(
    planted: Path,
) -> None:
    trainer = Path(sys.executable).parent / "trainer"
    assert trainer.exists(), "the trainer command comes with the install (make install)"
    env = {k: v for k, v in os.environ.items() if k != "TRAINER_DASHBOARD_LEAN"}
    done = subprocess.run(
        [str(trainer), "dashboard", "--kubeconfig", str(planted / "missing")],
        cwd=planted,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran(planted) == []
    # Our lean dashboard ran: it names the missing kubeconfig and exits 2.
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"kubeconfig {planted / 'missing'}" in done.stderr


async def test_webhook_review_workers_started_in_a_shared_directory_run_our_worker(
    planted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(planted)
    pool = Offload(inline_max_bytes=0)
    try:
        app = create_app(lookup(), now=lambda: NOW, offload=pool)
        resp = await asgi_request(app, "POST", PATH_VALIDATE_TRAINJOB, review(trainjob()))
        assert resp.json()["response"]["allowed"] is True, resp.json()
        assert pool.processes, "the review ran in a worker process"
    finally:
        await pool.close()
    assert ran(planted) == []
