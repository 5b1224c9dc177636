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

# Both tiers, serial. TEST_WORKERS=2 runs them on two workers (pytest-xdist, --dist loadgroup):
# what changes state the engine shares (the swarm, the faults' private engines and restarts,
# `runner gc`) is one xdist group, which one worker runs alone (tests/integration/conftest.py).
# It stays opt-in until two whole parallel runs have passed clean (README, Tests).
TEST_WORKERS ?= 0
test: setup
	$(PY) -m pytest $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup) $(PYTEST_ARGS)

# The unit tier alone (tests/unit/: no engine, no sshd, no sandbox), with no engine reachable: a
# test there that needs one fails instead of passing by luck. No set-up run. On two workers:
# most of its time is spent waiting on the processes it starts (TEST_FAST_WORKERS=0: serial).
TEST_FAST_WORKERS ?= 2
test-fast:
	DOCKER_HOST=unix:///nonexistent/runner-test-fast.sock RUNNER_TEST_NO_DOCKER=1 \
		$(PY) -m pytest tests/unit -q $(if $(filter 0,$(TEST_FAST_WORKERS)),,-n $(TEST_FAST_WORKERS)) $(PYTEST_ARGS)

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
