"""End to end: an elastic TrainJob (examples/torch-elastic) on the local plane, attacked as
the issue that asked for the sandbox did (docs/local-plane.md, "The network sandbox").

While the rendezvous and the workers' store are live, a second, unprivileged user
(``setpriv --reuid=65534``) tries to reach them, on the loopback address the pods were given
and on every address of this host: that connection is the first step of the pickle attack
on torchrun's store (write a pickled rendezvous state that the agent loads). It must be
refused everywhere, no pod process may listen in the host's network namespace, and the job
must still train across both nodes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from tests.e2e.listeners import Watch, assert_no_pod_listeners
from trainer.local.executor.sandbox import sandbox

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/torch-elastic/trainjob.yaml"
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
ATTACK = """
import socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=2).close()
        print("connected", target)
    except OSError as exc:
        print("refused", target, type(exc).__name__)
"""


def host_addresses() -> list[str]:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout
    return ["127.0.0.1", *[a for a in out.split() if not a.startswith("127.")][:4]]


def job_file(tmp_path: Path) -> Path:
    """The example's runtime and TrainJob, with the step that waits to be attacked."""
    runtime, job = yaml.safe_load_all(EXAMPLE.read_text())
    trainer = job["spec"]["trainer"]
    trainer["command"] = ["torchrun", str(ROOT / "tests/e2e/data/elastic_hold.py")]
    trainer["env"] = [{"name": "RELEASE_FILE", "value": str(tmp_path / "release")}]
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all([runtime, job]))
    return path


def test_an_elastic_trainjobs_rendezvous_is_out_of_reach_of_other_users(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    why = sandbox.available()
    if why:
        pytest.skip(f"this host cannot make network namespaces: {why}")
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to attack as a second user")
    argv = ["-m", "trainer.cli.main", "run", "-f", str(job_file(tmp_path)), "--timeout", "150"]
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    watch = Watch(proc)
    lines: list[str] = []
    ready: dict[str, tuple[str, str]] = {}
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"rank (\d) rendezvous (\S*) store (\S+)", line)
            if m:
                ready[m[1]] = (m[2], m[3])
            if len(ready) == 2:
                break
        assert len(ready) == 2, "".join(lines)
        ports = {t.rsplit(":", 1)[1] for pair in ready.values() for t in pair if ":" in t}
        targets = [f"{h}:{p}" for p in sorted(ports) for h in host_addresses()]
        attack = subprocess.run(
            [*NOBODY, sys.executable, "-I", "-c", ATTACK, *targets],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        assert "connected" not in attack.stdout, attack.stdout
        assert attack.stdout.count("refused") == len(targets), attack.stdout
    finally:
        (tmp_path / "release").touch()
        rest: list[str] = []
        reader = threading.Thread(target=lambda: rest.extend(proc.stdout or []), daemon=True)
        reader.start()
        proc.wait(timeout=180)
        reader.join(10)
        watch.join()
        lines += rest
    out = "".join(lines)
    assert proc.returncode == 0, out
    # Both nodes trained together: the all-reduce of a one from each is two, on both ranks.
    assert sorted(re.findall(r"rank (\d) sum (\S+)", out)) == [("0", "2"), ("1", "2")], out
    assert_no_pod_listeners(watch.found, out)
