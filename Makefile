# The verbs people type. Every target that needs the machine ready depends on `setup`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
export TESTCONTAINERS_RYUK_DISABLED := true

.PHONY: setup demo test test-fast bench bench-quick bench-peers images lint clean

setup:
	@bash scripts/setup.sh

demo: setup
	@bash scripts/demo.sh

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# The tests that need no Docker engine (not marked `docker`), with no engine reachable: a test
# that needs one and is not marked fails here instead of passing by luck. No set-up run.
test-fast:
	DOCKER_HOST=unix:///nonexistent/runner-test-fast.sock RUNNER_TEST_NO_DOCKER=1 \
		$(PY) -m pytest -m "not docker and not sshd" -q $(PYTEST_ARGS)

bench: setup
	$(PY) bench/run.py $(BENCH_ARGS)

bench-quick: setup
	$(PY) bench/run.py --quick $(BENCH_ARGS)

# Peers for the bench only, in their own venv (never runner's dependencies): SWE-ReX and
# llm-sandbox, against the locally built image (SWE-ReX's server is added to a copy of it).
bench-peers: setup
	[ -x bench/.venv/bin/python ] || python3 -m venv bench/.venv
	bench/.venv/bin/pip install -q swe-rex aiohttp "llm-sandbox[docker]"  # swe-rex's remote runtime needs aiohttp, which it does not declare
	bench/.venv/bin/pip install -q --target bench/.swerex-site swe-rex
	docker build -q --network none -t runner-bench/swerex:latest -f bench/swerex.Dockerfile bench

images: setup
	$(VENV)/bin/runner images build

lint:
	$(PY) -m ruff check runner executors tests bench scripts

clean:
	-$(VENV)/bin/runner gc
	rm -rf $(VENV) .pytest_cache
