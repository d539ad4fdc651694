"""requirements.lock (``make lock``, hack/lock.py) agrees with pyproject.toml, pins every
package any install uses, and is what this environment was installed from (docs/install.md,
"The lock")."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PROJECT = "kubeflow-trainer-py"
# What the lock is resolved for (hack/lock.py): markers are evaluated for this environment.
TARGET = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}


def _lock_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_lock", ROOT / "hack/lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hack_lock"] = module
    spec.loader.exec_module(module)
    return module


lock = _lock_module()


def pins() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if not line or line.startswith("#") or line[0].isspace():
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        assert match, f"requirements.lock: {line!r} is not `name==version`"
        out[canonicalize_name(match[1])] = match[2]
    return out


def pyproject_requirements() -> list[tuple[str, Requirement]]:
    """(where, requirement) for every requirement pyproject.toml names."""
    tables = lock.dependency_tables(tomllib.loads((ROOT / "pyproject.toml").read_text()))
    out = [("dependencies", Requirement(r)) for r in tables["dependencies"]]
    for extra, reqs in tables["optional-dependencies"].items():
        out += [(f"optional-dependencies.{extra}", Requirement(r)) for r in reqs]
    out += [("build-system.requires", Requirement(r)) for r in tables["build-system"]]
    return out


def test_the_lock_was_resolved_from_this_pyproject() -> None:
    recorded = lock.recorded_digest(LOCK.read_text())
    assert recorded == lock.digest(), (
        "pyproject.toml's dependencies changed since requirements.lock was written: run `make lock`"
    )
    check = subprocess.run(
        [sys.executable, str(ROOT / "hack/lock.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0, check.stderr


def test_any_change_to_a_dependency_table_makes_the_lock_stale(tmp_path: Path) -> None:
    text = (ROOT / "pyproject.toml").read_text()
    for old, new in [
        ('"PyYAML>=6.0.1"', '"PyYAML>=6.0.2"'),
        ('"pytest-xdist>=3.6",', '"pytest-xdist>=3.6",\n    "six",'),
        ('requires = ["setuptools>=77", "wheel"]', 'requires = ["setuptools>=78", "wheel"]'),
    ]:
        assert old in text
        changed = tmp_path / "pyproject.toml"
        changed.write_text(text.replace(old, new))
        assert lock.digest(changed) != lock.digest(), new
    # Other tables (tool settings) do not touch the lock.
    changed.write_text(text.replace("line-length = 100", "line-length = 99"))
    assert lock.digest(changed) == lock.digest()


def test_every_requirement_of_pyproject_is_satisfied_by_a_pin() -> None:
    pinned = pins()
    for where, req in pyproject_requirements():
        name = canonicalize_name(req.name)
        if name == PROJECT or (req.marker and not req.marker.evaluate(TARGET)):
            continue
        assert name in pinned, f"{where}: {req} has no pin in requirements.lock: run `make lock`"
        assert req.specifier.contains(Version(pinned[name]), prereleases=True), (
            f"{where}: {req} is not satisfied by the locked {name}=={pinned[name]}"
        )


def test_the_build_backend_and_the_whole_closure_are_locked() -> None:
    pinned = pins()
    assert {"setuptools", "wheel", "torch", "pyyaml", "pytest-xdist"} <= set(pinned)
    # Every dependency of every locked package (as installed here) is locked too.
    for name in pinned:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # not installed in this environment (the build backend, say)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker and not req.marker.evaluate({**TARGET, "extra": ""}):
                continue
            assert canonicalize_name(req.name) in pinned, f"{name} needs {req}, not locked"


def test_this_environment_was_installed_from_the_lock() -> None:
    pinned = pins()
    wrong = []
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name in pinned and dist.version != pinned[name]:
            wrong.append(f"{name} {dist.version} (locked: {pinned[name]})")
    assert not wrong, f"not the locked versions, run `make install`: {wrong}"


def test_the_makefile_installs_with_the_uv_that_wrote_the_lock() -> None:
    makefile = (ROOT / "Makefile").read_text()
    version = re.search(r"^UV_VERSION := (\S+)$", makefile, re.M)
    assert version, "Makefile: UV_VERSION"
    assert f"with uv {version[1]};" in LOCK.read_text()
    for target in ("$(VENV)/.installed-quickstart:", "$(VENV)/.installed:"):
        rule = makefile.split(target, 1)[1].split("\n\n", 1)[0]
        assert "$(LOCK)" in rule and "$(INSTALL)" in rule, target
    assert "--constraint $(LOCK)" in makefile and "--build-constraint $(LOCK)" in makefile


@pytest.mark.parametrize("stage", ["build", "build-data-cache"])
def test_the_image_installs_from_the_lock(stage: str) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    body = dockerfile.split(f" AS {stage}\n", 1)[1].split("\nFROM ", 1)[0]
    assert "COPY requirements.lock" in body
    assert "PIP_CONSTRAINT=/src/requirements.lock" in body
    assert "--constraint requirements.lock" in body
