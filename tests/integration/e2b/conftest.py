"""E2B's API on `runner serve`, with the official `e2b` SDK (pinned in pyproject's e2b-test extra)
as the client: a real server process on a loopback port (tests/integration/serve/conftest.py's
start_server), tenants made with the real `runner tenants` command, real containers."""
from __future__ import annotations

from pathlib import Path

import pytest

from ..serve.conftest import add_tenant, start_server  # noqa: F401 - the fixture is used by name

POLICY = """\
extends: default
name: e2btiny
sandbox: {lifecycle: per-session, pool_size: 0}
limits: {memory: 256m, pids: 128, timeout: 60}
"""
NO_BASH = """\
extends: default
name: nobash
features: {bash: false}
"""


@pytest.fixture
def e2b_server(tmp_path, start_server):  # noqa: F811
    """A server and two tenants: (url, alice's E2B key, bob's E2B key, data dir)."""
    from runner.servers.e2b.app import e2b_key

    data = tmp_path / "data"
    data.mkdir()
    pol = tmp_path / "e2btiny.yaml"
    pol.write_text(POLICY)
    alice = e2b_key(add_tenant("alice", data, pol))
    bob = e2b_key(add_tenant("bob", data, pol))
    srv = start_server("--data", str(data))
    return srv.url + "/e2b", alice, bob, data


@pytest.fixture
def as_tenant(e2b_server, monkeypatch):
    """Point the SDK at the server with alice's key (the SDK reads these variables)."""
    url, alice, _bob, _ = e2b_server
    monkeypatch.setenv("E2B_API_URL", url)
    monkeypatch.setenv("E2B_SANDBOX_URL", url)
    monkeypatch.setenv("E2B_API_KEY", alice)
    return e2b_server


def e2b_containers(docker_client, sid: str) -> list[dict]:
    return docker_client.api.containers(all=True, filters={"label": ["runner.managed=true", f"runner.e2b={sid}"]})


def write_policy(tmp: Path, text: str, name: str) -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(text)
    return p
