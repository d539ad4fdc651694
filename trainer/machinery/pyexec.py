"""Starting one of this program's own modules in a new Python interpreter, safely.

``python -m package.module`` puts the working directory first on ``sys.path``: started from a
directory another user can write to (``/tmp``, a shared project folder), a planted
``webhooks/worker.py`` or ``trainer/cli/dashboard_main.py`` would run instead of ours, as the
user who started the plane. Every re-exec goes through :func:`module_command` and
:func:`module_env`: ``-P`` (Python 3.11+) leaves the working directory off ``sys.path``, and
when this program runs from a source tree (an editable install, or ``PYTHONPATH`` pointing at a
checkout) that tree is named on ``PYTHONPATH``, so the child imports exactly the code that is
running now. docs/local-plane.md, "What a same-machine attacker can and cannot do".
"""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Mapping
from pathlib import Path

# The folder that holds the ``trainer`` and ``webhooks`` packages this process runs.
SOURCE_ROOT = str(Path(__file__).resolve().parents[1])


def module_command(module: str, *args: str) -> list[str]:
    """The argv that runs ``module`` with this interpreter, the working directory not on its
    import path."""
    return [sys.executable, "-P", "-m", module, *args]


def module_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with the running source tree first on ``PYTHONPATH`` when it is not a
    site-packages folder (those are on the child's path already; naming one on
    ``PYTHONPATH`` would put it before the standard library)."""
    env = dict(base)
    installed = {
        str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]
    }
    if SOURCE_ROOT in installed:
        return env
    parts = [SOURCE_ROOT, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env
