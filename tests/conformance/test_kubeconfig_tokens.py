"""The kubeconfig the local API server writes is read by kubectl as written, whatever the
token given with ``--token`` looks like (``1e3`` used to be read as a number: kubectl refused
the file with ``cannot unmarshal number into Go struct field AuthInfo.users.user.token``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from trainer.local.apiserver import APIServer

from .conftest import KUBECTL, SKIP_REASON

pytestmark = pytest.mark.skipif(KUBECTL is None, reason=SKIP_REASON)


@pytest.mark.parametrize("token", ["1e3", "y", "0o17", "0X1F", "1_000", "12:30:00", "on"])
def test_kubectl_reads_the_token_back(tmp_path: Path, token: str) -> None:
    path = tmp_path / "kubeconfig"
    APIServer(token=token).write_kubeconfig(str(path))
    assert KUBECTL is not None
    shown = subprocess.run(
        [KUBECTL, "config", "view", "--raw", "-o", "jsonpath={.users[0].user.token}"],
        env={
            "PATH": os.environ.get("PATH", "/usr/bin"),
            "HOME": str(tmp_path),
            "KUBECONFIG": str(path),
        },
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == token
