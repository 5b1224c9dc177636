"""The tool-behaviour suite runs every case against the full Runner on `local`, `docker` and
`swarm` (the two-node test swarm of tests/integration/swarm), with the same expected answers."""
from __future__ import annotations

import pytest

from runner import Runner

from ..swarm.fixtures import swarm_cluster  # noqa: F401


@pytest.fixture(params=["local", "docker", "swarm"])
def executor(request):
    if request.param != "local":
        request.getfixturevalue("no_leaks")
    return request.param


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def runner(request, executor, workspace):
    backend = None
    if executor == "swarm":
        backend = {"engines": request.getfixturevalue("swarm_cluster").engines()}
    with Runner(executor=executor, workspace=workspace, preset="all", backend=backend) as r:
        yield r


@pytest.fixture
def call(runner):
    return runner.call
