"""Fixtures of the fault suite: a private Docker engine the tests may stop and kill."""
from __future__ import annotations

import pytest

from .privengine import PrivateEngine

IMAGE = "runner/base:latest"


@pytest.fixture(scope="session")
def engine():
    """One private engine for the session, with the sandbox image copied into it once."""
    eng = PrivateEngine().start()
    try:
        eng.load_from_main(IMAGE)
        yield eng
    finally:
        eng.destroy()


@pytest.fixture
def private_engine(engine, monkeypatch):
    """The private engine, running, as this process's $DOCKER_HOST (a test may stop it: it is
    started again for the next one)."""
    if engine.proc is None or engine.proc.poll() is not None:
        engine.start()
    monkeypatch.setenv("DOCKER_HOST", engine.url)
    yield engine
    if engine.proc.poll() is not None:
        engine.start()


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    ws.chmod(0o777)
    return ws
