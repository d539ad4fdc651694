"""What `make quickstart` runs.

Today: validate every built-in runtime and example offline against the generated CRDs, then
show one TrainJob as the API server would store it (CRD defaults applied). As the render engine
and the local control plane land, this grows into a real end-to-end run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from trainer.api.load import check_object

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    trainer = [sys.executable, "-m", "trainer.cli.main"]
    print("==> trainer validate -f runtimes/ -f examples/", flush=True)
    rc = subprocess.call([*trainer, "validate", "-f", "runtimes", "-f", "examples"], cwd=ROOT)
    if rc != 0:
        return rc

    example = ROOT / "examples" / "torch-ddp-cpu" / "trainjob.yaml"
    result = check_object(yaml.safe_load(example.read_text()))
    print(f"\n==> {example.relative_to(ROOT)} as the API server stores it (defaults applied):")
    print(yaml.safe_dump(result.stored, sort_keys=False), end="")
    print(
        "\nquickstart: OK (offline checks; the end-to-end run arrives with the local control plane)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
