"""The integration tier: every test under tests/integration/ is marked `integration` here, by its
folder, whatever fixtures it uses: a `local` variant of a test that also runs on docker is still
an integration test. The folders say what the tests need (local sandboxes, the docker engine,
a real sshd, the two-node swarm, private engines for faults, the servers, ...).

For `make test`'s parallel run (pytest-xdist, --dist loadgroup) each file is an xdist group, which
one worker runs whole, and the tests that change state the engine shares with other tests are one
group of their own, which one worker runs:
the swarm (one cluster per run: the manager is the main engine), the faults (private engines,
dockerd restarts, killed runs and the sweep of what they leave) and `runner gc`."""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent

# folders whose every test goes to the serial group
SERIAL_FOLDERS = {"swarm", "faults"}
# single tests (file name, or file name::test name) that change what other tests' engines see
SERIAL_TESTS = {"test_maintenance.py::test_gc_removes_orphans_and_spares_live_sandboxes",
                "test_isolation.py::test_runner_gc_removes_what_a_killed_server_left_when_none_restarts"}
# a fixture that makes a test serial wherever it is (the swarm variants of toolcalls, conformance)
SERIAL_FIXTURES = {"swarm_cluster", "cluster", "private_engine", "engine"}


def serial(item) -> bool:
    rel = item.path.relative_to(HERE)
    if rel.parts[0] in SERIAL_FOLDERS:
        return True
    if SERIAL_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)  # the swarm variants (their fixture asks for the cluster)
    if callspec is not None and any(p.startswith("swarm") for p in callspec.id.split("-")):
        return True
    return f"{item.path.name}::{item.originalname}" in SERIAL_TESTS or item.path.name in SERIAL_TESTS


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)
            # the serial group; else the test's file, whose tests may share a module's fixture
            # (a dialect's runner) and what its earlier tests left (a file the next one reads)
            group = "serial" if serial(item) else item.path.relative_to(HERE).as_posix()
            item.add_marker(pytest.mark.xdist_group(group))
            if getattr(config.option, "loadgroup", False) and hasattr(item, "_id") and "@" not in item.nodeid:
                # pytest 9.2 reads a node's id from _id: xdist 3.8 still writes the group into
                # _nodeid, which nothing reads any more, so without this no group is kept together
                from _pytest.nodes import coerce_node_id

                item._id = coerce_node_id(f"{item.nodeid}@{group}")
