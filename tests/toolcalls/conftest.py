"""The tool-behaviour suite runs every case against the full Runner on `local` and `docker`,
with the same expected answers."""
from __future__ import annotations

import pytest

from runner import Runner


@pytest.fixture(params=["local", "docker"])
def executor(request):
    if request.param == "docker":
        request.getfixturevalue("no_leaks")
    return request.param


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def runner(executor, workspace):
    with Runner(executor=executor, workspace=workspace, preset="all") as r:
        yield r


@pytest.fixture
def call(runner):
    return runner.call
