"""The bounded reader's refusals are the same across the PyYAML range pyproject.toml declares
(``PyYAML>=6.0.1``): its oldest release, in a venv of its own, gives the same messages for
the same hostile documents as the locked release this suite runs on. PyYAML 6.0.4's libyaml
refuses deep flow collections by itself (trainer/machinery/safeload.py, ``_check_event_depth``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
OLDEST = "6.0.1"

# Loads safeload.py by its path (it imports nothing of the project) and prints, for each
# document, the message it is refused with.
PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("safeload", sys.argv[1])
safeload = sys.modules["safeload"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(safeload)
import yaml
cases = {
    "flow-list": "[" * 50_000 + "]" * 50_000,
    "flow-map": "{a: " * 20_000 + "1" + "}" * 20_000,
    "block-list": "- " * 50_000 + "x",
    "flow-in-block": "x:\\n  - " + "[" * 1_500,
    "at-limit-31": "[" * 31 + "]" * 31,
    "alias-bomb": "a: &a [x,x,x,x,x,x,x,x,x,x]\\nb: &b [" + ",".join(["*a"] * 10) + "]\\n"
        + "c: &c [" + ",".join(["*b"] * 10) + "]\\nd: [" + ",".join(["*c"] * 10) + "]\\n",
    "syntax": "a: [1, 2\\nb: 3\\n",
}
out = {"pyyaml": yaml.__version__, "libyaml": yaml.__with_libyaml__}
for name, text in cases.items():
    limits = safeload.Limits(max_depth=30) if name.startswith("at-limit") else safeload.FILE_LIMITS
    try:
        safeload.load_yaml_documents(text, "f.yaml", limits)
        out[name] = "accepted"
    except safeload.InputError as exc:
        out[name] = str(exc)
print(json.dumps(out))
"""


def _probe(python: str) -> dict[str, object]:
    done = subprocess.run(
        [python, "-c", PROBE, str(ROOT / "trainer/machinery/safeload.py")],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _uv() -> str | None:
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


@pytest.fixture(scope="module")
def oldest_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    uv = _uv()
    if uv is None:
        pytest.skip("uv is not installed (make install puts it in .venv)")
    venv = tmp_path_factory.mktemp("pyyaml-oldest") / "venv"
    made = subprocess.run(
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    python = str(venv / "bin/python")
    got = subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", python, f"PyYAML=={OLDEST}"],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if got.returncode != 0:
        pytest.skip(f"PyYAML {OLDEST} could not be installed from the registry: {got.stderr}")
    return python


def test_the_oldest_declared_pyyaml_is_the_low_end_of_the_range() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"PyYAML>={OLDEST}"' in pyproject


def test_refusals_read_the_same_with_the_oldest_and_the_locked_pyyaml(oldest_python: str) -> None:
    locked = _probe(sys.executable)
    oldest = _probe(oldest_python)
    assert locked.pop("pyyaml") == yaml.__version__
    assert oldest.pop("pyyaml") == OLDEST
    assert oldest.pop("libyaml") is True and locked.pop("libyaml") is True
    assert oldest == locked
    for name in ("flow-list", "flow-map", "block-list", "flow-in-block"):
        assert "nested deeper than the limit of 100 levels" in str(locked[name]), name
    assert str(locked["flow-list"]) == "f.yaml: line 1, column 101: nested deeper than the " + (
        "limit of 100 levels"
    )
    assert "nested deeper than the limit of 30 levels" in str(locked["at-limit-31"])
    assert "YAML aliases expand this document" in str(locked["alias-bomb"])
    assert "YAML syntax error" in str(locked["syntax"])
