"""End to end: why a TrainJob failed, on the TrainJob (docs/troubleshooting.md, "Why a TrainJob
failed"), through the controller on the local plane with ``trainer run``. Two TrainJobs of two
nodes each, one on a runtime whose pods restart in place (``restartPolicy: OnFailure``, so
the Job controller deletes the failed pod at its backoff limit) and one whose pods do not
(``Never``): node 1 writes "shard 7 is corrupt" to stderr and exits 3 while node 0 still runs.
Each ends Failed with JobSet's reason and a message naming node index 1, exit code 3 and that
line, which ``trainer run`` prints before it exits non-zero."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = (
    "import os, sys, time\n"
    "if os.environ['JOB_COMPLETION_INDEX'] == '1':\n"
    "    print('loading shard 7', flush=True)\n"
    "    print('shard 7 is corrupt', file=sys.stderr, flush=True)\n"
    "    sys.exit(3)\n"
    "time.sleep(120)\n"
)


def runtime(name: str, restart_policy: str, backoff_limit: int) -> dict[str, Any]:
    container = {
        "name": "node",
        "image": "python:3.11-slim",
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "mlPolicy": {"numNodes": 1},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {
                                    "backoffLimit": backoff_limit,
                                    "template": {
                                        "spec": {
                                            "restartPolicy": restart_policy,
                                            "containers": [container],
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


def trainjob(name: str, runtime_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "runtimeRef": {"name": runtime_name, "kind": "TrainingRuntime"},
            "trainer": {"numNodes": 2, "command": [sys.executable, "-c", PROGRAM]},
        },
    }


def test_a_failed_node_is_named_with_its_exit_code_and_last_output_for_both_policies(
    tmp_path: Path,
) -> None:
    docs = [
        runtime("restarts-in-place", "OnFailure", 1),
        runtime("never-restarts", "Never", 0),
        trainjob("corrupt-onfailure", "restarts-in-place"),
        trainjob("corrupt-never", "never-restarts"),
    ]
    path = tmp_path / "jobs.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    done = subprocess.run(
        [sys.executable, "-m", "trainer.cli.main", "run", "-f", str(path), "--timeout", "90"],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    for name in ("corrupt-onfailure", "corrupt-never"):
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if f"TrainJob default/{name} failed: " in line)
        assert "failed: FailedJobs: jobset failed due to one or more job failures" in lines[at]
        assert (
            f"first failure: replicated job node, node index 1, pod {name}-node-0-1-" in lines[at]
        ), out
        assert "container node exited with code 3 (Error); last output:" in lines[at], out
        # The end of its output, stderr included, follows, indented.
        block = []
        for line in lines[at + 1 :]:
            quoted = re.fullmatch(r"\[\s*[0-9.]+s\]     (.*)", line)
            if quoted is None:
                break
            block.append(quoted.group(1))
        assert block[-2:] == ["loading shard 7", "shard 7 is corrupt"], out
