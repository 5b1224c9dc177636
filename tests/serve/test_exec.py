"""POST /v1/exec: its timeout, its place among the tenant's sessions, and its container's end
(the client gone, the server killed)."""
from __future__ import annotations

import threading

import httpx
import pytest

from .conftest import add_tenant, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")

SHORT = """\
extends: default
name: short
sandbox: {lifecycle: per-session, pool_size: 0}
limits: {timeout: 2, max_timeout: 3}
"""


def execs(docker_client, tenant: str) -> list[dict]:
    return docker_client.api.containers(all=True, filters={"label": ["runner.managed=true", "runner.role=serve-exec",
                                                                     f"runner.tenant={tenant}"]})


def test_an_exec_gets_the_policys_timeout_capped_by_its_maximum(start_server, data, tmp_path):
    pol = tmp_path / "short.yaml"
    pol.write_text(SHORT)
    key = add_tenant("short", data, pol, "--image", "runner/base")
    server = start_server("--data", str(data))
    with server.client(key, timeout=60) as c:
        for extra in ({}, {"timeout": 3600}):
            r = c.post("/v1/exec", json={"image": "runner/base", "cmd": ["sleep", "600"], **extra})
            assert r.status_code == 200, r.text
            assert r.json()["timed_out"] is True and r.json()["exit_code"] == 124, r.text


def test_a_running_exec_counts_as_a_session_and_ends_with_its_client(start_server, data, policy_file, docker_client):
    key = add_tenant("one", data, policy_file, "--image", "runner/base", "--max-sessions", "1")
    server = start_server("--data", str(data))
    gave_up = threading.Event()

    def impatient():  # waits 30 s for an answer, then closes its connection
        with server.client(key, timeout=30) as c:
            try:
                c.post("/v1/exec", json={"image": "runner/base", "cmd": ["sleep", "600"]})
            except httpx.TimeoutException:
                gave_up.set()
    t = threading.Thread(target=impatient)
    t.start()
    with server.client(key) as c:
        wait_for(lambda: execs(docker_client, "one"), 30, "the exec's container")
        full = c.post("/v1/sessions", json={})
        assert full.status_code == 429 and "1 running /v1/exec" in full.json()["detail"], full.text
        second = c.post("/v1/exec", json={"image": "runner/base", "cmd": ["true"]})
        assert second.status_code == 429 and "1 running /v1/exec" in second.json()["detail"], second.text
        t.join(120)
        assert gave_up.is_set()
        wait_for(lambda: not execs(docker_client, "one"), 60, "the exec's container removed once its client left")
        wait_for(lambda: c.post("/v1/exec", json={"image": "runner/base", "cmd": ["true"]}).status_code == 200, 30,
                 "room for an exec again")


def test_a_killed_servers_exec_is_removed_at_the_next_start(start_server, data, policy_file, docker_client):
    key = add_tenant("killed", data, policy_file, "--image", "runner/base")
    server = start_server("--data", str(data))

    def run():
        with server.client(key) as c:
            try:
                c.post("/v1/exec", json={"image": "runner/base", "cmd": ["sleep", "600"]})
            except httpx.HTTPError:  # the server dies under it
                pass
    t = threading.Thread(target=run)
    t.start()
    wait_for(lambda: execs(docker_client, "killed"), 30, "the exec's container")
    server.proc.kill()
    server.proc.wait()
    t.join(60)
    assert execs(docker_client, "killed")  # left by the dead server until one starts again
    start_server("--data", str(data))
    assert execs(docker_client, "killed") == []
