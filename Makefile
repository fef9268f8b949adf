## help: list targets
help:
	@grep -E '^## ' Makefile | sed 's/^## /  /'

## setup: Debian packages (if missing), gpu-catalog with dev tools (editable), the pinned toolchain
setup:
	scripts/install-system-deps
	python3 -m pip install -q -e '.[dev]'
	catalog toolchain ensure

## lint: ruff, mypy (strict) and the import layering contracts
lint:
	ruff check .
	mypy
	lint-imports

## test: setup, lint, then every test (unit and integration; needs root)
test: setup lint
	python3 -m pytest -q

## unit: the fast tests only (no toolchain binary, cluster, Slurm or registry)
unit:
	python3 -m pytest -q -m "not toolchain and not integration and not slurm and not registry and not kind"

.PHONY: help setup lint test unit
