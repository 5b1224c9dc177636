"""The unit tier: every test under tests/unit/ is marked `unit` here, by its folder. No engine, no
sshd, no sandbox of any backend: the code's logic, with real files and real processes of this
machine where the logic needs them. `make test-fast` runs this folder alone with no engine
reachable. A test here that asks for the engine or an sshd (its fixtures or its docker, swarm
or ssh variants: the markers tests/conftest.py sets) stops the collection: it belongs in
tests/integration/, by what it needs."""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


@pytest.hookimpl(trylast=True)  # after tests/conftest.py has set the docker and sshd markers
def pytest_collection_modifyitems(config, items):
    misplaced = []
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.unit)
            if item.get_closest_marker("docker") or item.get_closest_marker("sshd"):
                misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError("tests/unit/ holds tests that need the engine or an sshd; move them to "
                                "tests/integration/: " + ", ".join(misplaced))
