# gpu-catalog's one command surface. Everything Python runs from the project's own virtual
# environment (.venv), so `make setup` never changes the machine's global Python packages.
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
UNIT_MARKERS := not toolchain and not integration and not slurm and not registry and not kind
# The Kubernetes policy scanner, pinned, in its own environment: its dependencies may clash with ours.
CHECKOV_VERSION := 3.3.30
SCAN_VENV ?= .venv-scan

## help: list targets
help:
	@grep -E '^## ' Makefile | sed 's/^## /  /'

## setup: Debian packages (if missing), .venv with gpu-catalog and its dev tools (editable), the pinned toolchain, a Docker engine and the kind node image
setup: $(VENV)/.installed
	scripts/install-system-deps
	$(BIN)/catalog toolchain ensure
	$(BIN)/catalog engine up
	$(BIN)/catalog engine node-image

# Reinstalled only when the package's metadata changes.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

## lint: ruff, mypy (strict) and the import layering contracts
lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

## scan: render every bundle x profile and run checkov on it against the reviewed exceptions (policy/scan-exceptions.yaml)
scan: $(VENV)/.installed $(SCAN_VENV)/.installed-$(CHECKOV_VERSION)
	$(PY) scripts/policy_scan.py --checkov $(SCAN_VENV)/bin/checkov

$(SCAN_VENV)/.installed-$(CHECKOV_VERSION):
	test -x $(SCAN_VENV)/bin/python || python3 -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/python -m pip install -q 'checkov==$(CHECKOV_VERSION)'
	touch $@

# Test workers (pytest-xdist): most integration time is spent waiting on controllers, not CPU, so
# a 2-core machine runs more workers than cores. Tests sharing a cluster stay on one worker, the
# longest start first, and a shared cluster stops after its last test (tests/conftest.py).
TEST_WORKERS ?= 4

## test: setup, lint, policy scan, then every test (unit and integration; needs root) on TEST_WORKERS workers, the slowest listed at the end
test: setup lint scan
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations-out build/test-durations.json

## unit: the fast tests only (no toolchain binary, cluster, Slurm or registry)
unit: $(VENV)/.installed
	$(PY) -m pytest -q -m "$(UNIT_MARKERS)"

# The compatibility matrix: bundles x Kubernetes minors (docs/matrix.md).
MATRIX_BUNDLES ?= gpu-queueing slurm
MATRIX_KUBERNETES ?= 1.34,1.35,1.36,1.37
MATRIX_OUT ?= out/matrix

## matrix: certify MATRIX_BUNDLES on each of MATRIX_KUBERNETES (one sim cluster at a time; cells already certified for the same digest are reused) into MATRIX_OUT
matrix: $(VENV)/.installed
	$(BIN)/catalog matrix $(MATRIX_BUNDLES) --kubernetes $(MATRIX_KUBERNETES) --out $(MATRIX_OUT)

## upstream-e2e: Kueue's own upstream e2e specs (Job, Pod, Deployment, StatefulSet, fair sharing) on a sim cluster with the gpu-queueing bundle's Kueue (docs/upstream-e2e.md; not part of `make test`)
upstream-e2e: $(VENV)/.installed
	$(PY) -m gpucatalog.pipelines.upstream_e2e --out build/upstream-e2e

.PHONY: help setup lint scan test unit matrix upstream-e2e
