"""End to end: a v1 PyTorchJob, converted with ``trainer convert``, runs to Complete with
``trainer run`` on the local control plane, its pods seeing the v1 env (MASTER_ADDR,
MASTER_PORT, WORLD_SIZE, RANK) and forming one gloo process group."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:  # pragma: no cover - the dev install includes the torch extra
    HAVE_TORCH = False


def trainer(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainer.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


@pytest.mark.skipif(not HAVE_TORCH, reason="needs the torch extra (pip install -e '.[torch]')")
def test_converted_pytorchjob_runs_to_complete(tmp_path: Path) -> None:
    out_dir = tmp_path / "converted"
    conv = trainer(
        "convert",
        "-f",
        str(ROOT / "tests/e2e/data/v1-pytorchjob.yaml"),
        "-o",
        str(out_dir),
        timeout=60,
    )
    assert conv.returncode == 0, conv.stdout + conv.stderr
    converted = out_dir / "pytorch-allreduce.yaml"
    assert converted.exists()
    run = trainer("run", "-f", str(converted), "--timeout", "240", timeout=300)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert "TrainJob default/pytorch-allreduce: Complete" in out
    ranks = re.findall(r"rank (\d)/2 env RANK=(\d) WORLD_SIZE=2 sum=1", out)
    assert sorted(ranks) == [("0", "0"), ("1", "1")], out


# Long tests: make test starts the files marked slow first (pyproject.toml, markers).
pytestmark = pytest.mark.slow
