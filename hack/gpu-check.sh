#!/usr/bin/env bash
# Check this machine's NVIDIA GPUs on the local plane: one verdict line per scenario
# (docs/local-plane.md, "Checking a GPU machine"); the arguments go to hack/gpu_check.py (--help).
# The interpreter must have the project and, for the CUDA scenarios, a CUDA build of torch:
# $GPU_CHECK_PYTHON, else the checkout's .venv, else python3.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${GPU_CHECK_PYTHON:-}"
if [ -z "$python" ]; then
	if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python=python3; fi
fi
exec "$python" "$root/hack/gpu_check.py" "$@"
