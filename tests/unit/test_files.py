"""trainer/machinery/files.py: a secret is written into a file that already has its final mode, and
replaces the old file whole; nothing is left behind when writing fails."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trainer.local.executor.kubelet.policy.volumes import VolumeFile, VolumePlan, write_volume
from trainer.machinery.files import write_file


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("final", [0o600, 0o400, 0o640, 0o644])
def test_the_data_lands_in_a_file_that_already_has_its_final_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, final: int
) -> None:
    target = tmp_path / "id_rsa"
    target.write_bytes(b"old")
    seen: list[tuple[int, int, bytes]] = []
    real_fsync = os.fsync

    def watch(fd: int) -> None:  # called once the data is written, before the rename
        st = os.fstat(fd)
        seen.append((stat.S_IMODE(st.st_mode), st.st_size, target.read_bytes()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", watch)
    old_umask = os.umask(0)  # a permissive umask must not widen the mode either
    try:
        write_file(target, b"-----BEGIN OPENSSH PRIVATE KEY-----", final)
    finally:
        os.umask(old_umask)
    assert seen == [(final, 35, b"old")]  # the old file was in place until the rename
    assert target.read_bytes() == b"-----BEGIN OPENSSH PRIVATE KEY-----"
    assert mode(target) == final
    assert sorted(p.name for p in tmp_path.iterdir()) == ["id_rsa"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "tls.key"
    target.write_bytes(b"old")

    def fail(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="No space left"):
        write_file(target, b"new", 0o600)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tls.key"]


def test_a_symlink_at_the_path_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "tls.key"
    link.symlink_to(victim)
    write_file(link, b"key", 0o600)
    assert victim.read_bytes() == b"keep"
    assert not link.is_symlink() and link.read_bytes() == b"key"


def test_a_volume_rewrite_replaces_read_only_secret_files(tmp_path: Path) -> None:
    plan = VolumePlan("ssh", "files", str(tmp_path / "ssh"), create=True)
    plan.files = [VolumeFile("ssh-privatekey", b"first", 0o400)]
    write_volume(plan)
    key = tmp_path / "ssh/ssh-privatekey"
    assert (key.read_bytes(), mode(key)) == (b"first", 0o400)
    plan.files = [VolumeFile("ssh-privatekey", b"second", 0o400)]
    write_volume(plan)
    assert (key.read_bytes(), mode(key)) == (b"second", 0o400)
