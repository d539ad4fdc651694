"""The real-Kubernetes test bed by hand: ``hack/cluster.py up|run|exec`` (docs/testbed.md).

The command lives in hack/testbed/cli.py; this path is what the docs give. (Kept out of mypy's
file list: hack/bench/cluster.py, the cluster benchmark, has the same module name.)
"""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "testbed"))
runpy.run_module("cli", run_name="__main__")
