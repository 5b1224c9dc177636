# The verbs people type. Every target that needs the machine ready depends on `setup`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export TESTCONTAINERS_RYUK_DISABLED := true

.PHONY: setup demo test bench images lint clean

setup:
	@bash scripts/setup.sh

demo: setup
	@bash scripts/demo.sh

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(PY) bench/run.py

images: setup
	$(VENV)/bin/runner images build

lint:
	$(PY) -m compileall -q runner executors tests bench

clean:
	-$(VENV)/bin/runner gc
	rm -rf $(VENV) .pytest_cache
