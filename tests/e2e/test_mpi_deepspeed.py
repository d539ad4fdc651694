"""End to end: examples/deepspeed-cpu, a DeepSpeed-shaped TrainJob on the built-in
deepspeed-distributed runtime (runLauncherAsNode: the launcher runs a rank too), run for real
by `trainer run` with OpenSSH and OpenMPI (docs/local-plane.md, "MPI on the local plane").
Apart from tests/e2e/test_mpi_run.py, whose helpers and skip reasons it shares, only so that
pytest-xdist (whole files per worker) runs this, the slowest MPI test, beside the others."""

from __future__ import annotations

import re

import pytest

from tests.e2e.test_mpi_run import MISSING, ROOT, pod_lines, trainer_run

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bool(MISSING), reason=MISSING)]


def test_deepspeed_shaped_job_runs_ranks_on_the_launcher_too() -> None:
    pytest.importorskip("torch", reason="needs torch (the `torch` extra)")
    done = trainer_run(ROOT / "examples/deepspeed-cpu/trainjob.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = "\n".join(pod_lines(done.stdout, "deepspeed-cpu-launcher-0-0"))
    found = re.findall(
        r"rank (\d)/2 on (\S+): loss ([0-9.]+) -> ([0-9.]+), weights checksum (-?[0-9.]+)", lines
    )
    hosts = {rank: host for rank, host, *_ in found}
    assert hosts == {
        "0": "deepspeed-cpu-launcher-0-0",  # runLauncherAsNode: the launcher is a node
        "1": "deepspeed-cpu-node-0-0",
    }, done.stdout
    assert len({checksum for *_, checksum in found}) == 1  # gradients were averaged
    assert all(float(last) < float(first) for _, _, first, last, _ in found)
