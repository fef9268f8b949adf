## help: list targets
help:
	@grep -E '^## ' Makefile | sed 's/^## /  /'

## setup: install gpu-catalog (editable) with dev tools, and build the pinned toolchain
setup:
	python3 -m pip install -q -e '.[dev]'
	catalog toolchain ensure

## lint: ruff, mypy and the import layering contracts
lint:
	ruff check .
	mypy
	lint-imports

## test: lint, then every test (unit and integration)
test: lint
	python3 -m pytest -q

.PHONY: help setup lint test
