"""What `make quickstart` runs.

Today: validate every built-in runtime and example offline against the generated CRDs, then
render the 2-node CPU DDP example to the exact objects the controller would apply (runtime
snapshot and JobSet) and point at the torchrun environment it injects. As the local control
plane lands, this grows into a real end-to-end training run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/torch-ddp-cpu/trainjob.yaml"


def step(title: str, *args: str) -> subprocess.CompletedProcess[str]:
    print(f"\n==> trainer {' '.join(args)}    # {title}", flush=True)
    return subprocess.run(
        [sys.executable, "-m", "trainer.cli.main", *args],
        cwd=ROOT,
        text=True,
        capture_output=True,
        check=False,
    )


def main() -> int:
    checked = step(
        "offline checks against the CRDs", "validate", "-f", "runtimes", "-f", "examples"
    )
    print(checked.stdout, end="")
    if checked.returncode != 0:
        print(checked.stderr, file=sys.stderr)
        return checked.returncode

    rendered = step("what the controller would apply", "render", "-f", EXAMPLE)
    if rendered.returncode != 0:
        print(rendered.stderr, file=sys.stderr)
        return rendered.returncode
    print(rendered.stdout, end="")

    jobset = list(yaml.safe_load_all(rendered.stdout))[-1]
    rjob = jobset["spec"]["replicatedJobs"][0]
    pod = rjob["template"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value", "<fieldRef>") for e in pod["containers"][0]["env"]}
    pet = {k: v for k, v in env.items() if k.startswith("PET_")}
    print(
        f"\nquickstart: OK - JobSet {jobset['metadata']['name']!r}: "
        f"{rjob['template']['spec']['parallelism']} torchrun nodes with "
        + ", ".join(f"{k}={v}" for k, v in pet.items())
    )
    print("(the end-to-end run on the embedded local control plane arrives with `trainer run`)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
