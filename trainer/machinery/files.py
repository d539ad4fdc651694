"""Files and folders that may hold a secret.

:func:`write_file` writes a file created with its final mode, filled, then renamed into place.

``path.write_bytes(data)`` followed by ``path.chmod(mode)`` leaves a window in which the data
sits in a file of the umask's mode (usually 0644): another user who can reach the folder
reads the key in that window. :func:`write_file` creates a temporary file in the same folder
(``mkstemp``: mode 0600, never following a link), sets the final mode before a byte is
written, and renames it over ``path``, so a reader sees the old file or the whole new one,
never a half-written or briefly readable one. Used for webhook certificates, Secret and
ConfigMap volumes and sshd host keys.

:func:`private_dir` makes a folder only this user can enter (the local plane's webhook
certificates), refusing a symlink or another user's folder planted at its path.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_file(path: str | os.PathLike[str], data: bytes, mode: int) -> None:
    """Atomically make ``path`` a file holding ``data`` with exactly ``mode`` (umask aside)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def private_dir(path: Path) -> Path:
    """``path`` as a directory only this user can enter (0700), made so from the start; one
    that exists must be ours and is closed to others."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.is_symlink() or path.stat().st_uid != os.geteuid():
        raise RuntimeError(f"{path}: not a directory of this user's")
    path.chmod(0o700)
    return path
