"""Each local plane keeps its webhook certificate in a private directory of its own (its state
directory's ``webhook-certs``, mode 0700, key 0600), never in upstream's fixed
``/tmp/k8s-webhook-server/serving-certs``: that path is shared by every user of a machine, so
one user's planes broke every other user's, and a planted symlink could redirect the key."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from trainer.cli.localplane import start_local_plane
from trainer.machinery.files import private_dir


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_two_planes_each_serve_their_webhook_from_their_own_private_directory(
    tmp_path: Path,
) -> None:
    planes = [
        await start_local_plane(work_dir=tmp_path, state_dir=tmp_path / f"state-{i}")
        for i in range(2)
    ]
    try:
        keys = []
        for i in range(2):
            certs = tmp_path / f"state-{i}" / "webhook-certs"
            assert mode(certs) == 0o700
            assert mode(certs / "tls.key") == 0o600
            assert mode(certs / "tls.crt") == 0o644
            keys.append((certs / "tls.key").read_bytes())
        assert keys[0] != keys[1]
    finally:
        for plane in planes:
            await plane.close()


def test_a_symlink_or_another_users_directory_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "linked"
    link.symlink_to(elsewhere)
    with pytest.raises(RuntimeError, match="not a directory of this user's"):
        private_dir(link)
    if os.geteuid() == 0 and shutil.which("setpriv"):
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        with pytest.raises(RuntimeError, match=f"{theirs}: not a directory of this user's"):
            private_dir(theirs)
    opened = tmp_path / "opened"
    opened.mkdir(mode=0o777)
    opened.chmod(0o777)
    assert mode(private_dir(opened)) == 0o700


def test_another_user_cannot_list_or_read_the_certificate_directory() -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to act as a second user")
    base = Path(tempfile.mkdtemp(prefix="state-", dir="/tmp"))
    try:
        base.chmod(0o755)  # the parent is open to others; the private directory must not be
        certs = private_dir(base / "webhook-certs")
        (certs / "tls.key").write_bytes(b"secret")

        def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                capture_output=True,
                text=True,
                check=False,
                timeout=30,
            )

        assert as_nobody("ls", str(base)).returncode == 0  # the check below can fail
        for argv in (["ls", str(certs)], ["cat", str(certs / "tls.key")]):
            done = as_nobody(*argv)
            assert done.returncode != 0 and "Permission denied" in done.stderr, done
    finally:
        shutil.rmtree(base)
