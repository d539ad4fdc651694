"""End to end: examples/mpich, an MPICH TrainJob (mlPolicy.mpi.mpiImplementation: MPICH) run for
real by `trainer run`: real OpenSSH and MPICH's Hydra from the PyPI `mpich` wheel, which
`make install` puts into .venv/mpich (docs/local-plane.md, "MPICH"). Four ranks on two node
pods must each report the allreduce sum that only all four contributions make, the MPICH
library, and the hostname of the node pod it ran on. Skipped, with the reason, where sshd, the
mpich prefix, mpi4py or per-pod hostnames are missing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.e2e.test_mpi_run import pod_lines, trainer_run
from trainer.local.executor.sandbox import ssh, uts

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/mpich/trainjob.yaml"
MPIEXEC = ROOT / ".venv/mpich/bin/mpiexec"


def _missing() -> str:
    """Why examples/mpich cannot run here, or ``""``."""
    if not os.access("/usr/sbin/sshd", os.X_OK) or not os.access(ssh.SSH_CLIENT, os.X_OK):
        return "OpenSSH's sshd and ssh are needed (hack/system-packages.sh installs them)"
    if not os.access(MPIEXEC, os.X_OK):
        return f"MPICH's mpiexec is needed at {MPIEXEC} (`make install` puts the mpich wheel there)"
    try:
        import mpi4py  # noqa: F401, PLC0415 - optional extra
    except ImportError:
        return "mpi4py is needed (the `mpi` extra: pip install -e '.[mpi]')"
    refused = uts.available()
    if refused:
        return f"pods cannot get hostnames of their own on this kernel: {refused}"
    if ssh.private_parent() is None:
        return "no state directory OpenSSH's StrictModes accepts (home is group-writable)"
    return ""


MISSING = _missing()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=MISSING)

RANK = re.compile(
    r"rank (\d)/(\d) on (\S+) \((MPICH Version:)\s+\S+\): allreduce sum (\d+) \(expected (\d+)\)"
)


def test_mpich_example_runs_two_ranks_on_each_of_two_node_pods() -> None:
    done = trainer_run(EXAMPLE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "TrainJob default/mpich-allreduce: Complete" in done.stdout
    launcher = "\n".join(pod_lines(done.stdout, "mpich-allreduce-launcher-0-0"))
    # 1 + 2 + 3 + 4: every rank's contribution reached every rank, over both pods.
    assert sorted(RANK.findall(launcher)) == [
        ("0", "4", "mpich-allreduce-node-0-0", "MPICH Version:", "10", "10"),
        ("1", "4", "mpich-allreduce-node-0-0", "MPICH Version:", "10", "10"),
        ("2", "4", "mpich-allreduce-node-0-1", "MPICH Version:", "10", "10"),
        ("3", "4", "mpich-allreduce-node-0-1", "MPICH Version:", "10", "10"),
    ], done.stdout
    # Rank 0 gathered every rank's own hostname.
    assert (
        "ranks' hosts: "
        + " ".join(["mpich-allreduce-node-0-0"] * 2 + ["mpich-allreduce-node-0-1"] * 2)
        in launcher
    ), done.stdout
    # Hydra reached the node pods over ssh: each node pod's sshd accepted the Secret's key.
    for node in ("mpich-allreduce-node-0-0", "mpich-allreduce-node-0-1"):
        assert any("Accepted publickey" in line for line in pod_lines(done.stdout, node))
