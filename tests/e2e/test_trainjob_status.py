"""End to end: ``trainer run --feature-gates TrainJobStatus=true`` of a TrainJob whose
process reads the status-server URL, its projected token and the CA from the environment and
POSTs progress twice with urllib; the TrainJob's status.trainerStatus (printed by trainer run
as it changes in the API) shows each report, the second replacing the first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
EXAMPLE = ROOT / "examples/status-reporting/trainjob.yaml"


def run(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "trainer.cli.main", "run", "-f", str(EXAMPLE), "--timeout", "120", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_training_code_reports_progress_into_trainer_status() -> None:
    proc = run("--feature-gates", "TrainJobStatus=true")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert out.count("status server answered 200") == 2, out
    first = "TrainJob default/progress-demo reports progress 50%, ETA 50s, loss=0.50, accuracy=0.70"
    second = "TrainJob default/progress-demo reports progress 100%, ETA 0s, loss=0.25"
    assert first in out and second in out, out
    assert out.index(first) < out.index(second)
    assert "TrainJob default/progress-demo: Complete" in out


def test_without_the_gate_the_pod_has_no_status_server() -> None:
    proc = run()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "KeyError: 'KUBEFLOW_TRAINER_SERVER_URL'" in proc.stdout
    assert "reports progress" not in proc.stdout
