"""`runner tenants update` on a running server (issue 50): quotas and grants apply at the
tenant's very next request, no restart; images and policies are proved when granted; commands
that only read or change a database never create one."""
from __future__ import annotations

import os
import subprocess

import pytest

from .conftest import add_tenant, fresh_minute, runner_argv, tenants

pytestmark = pytest.mark.usefixtures("no_leaks")


def refused(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    out = subprocess.run(runner_argv("tenants", *args), capture_output=True, text=True, timeout=120,
                         env={**os.environ, **(env or {})})
    assert out.returncode != 0, out
    return out


def test_quotas_change_on_a_running_server_at_the_next_request(start_server, data, policy_file):
    key = add_tenant("grows", data, policy_file, "--max-sessions", "1", "--calls-per-minute", "1")
    server = start_server("--data", str(data))
    with server.client(key) as c:
        first = c.post("/v1/sessions", json={}).json()["id"]
        assert c.post("/v1/sessions", json={}).status_code == 429
        tenants("update", "grows", "--max-sessions", "2", data=data)
        second = c.post("/v1/sessions", json={})  # no wait, no restart
        assert second.status_code == 201, second.text

        fresh_minute()
        assert c.post(f"/v1/sessions/{first}/calls", json={"tool": "ls", "args": {}}).status_code == 200
        over = c.post(f"/v1/sessions/{first}/calls", json={"tool": "ls", "args": {}})
        assert over.status_code == 429 and "1 calls per minute" in over.text
        shown = tenants("update", "grows", "--calls-per-minute", "100", data=data)
        assert '"calls_per_minute": 100' in shown and '"max_sessions": 2' in shown
        assert c.post(f"/v1/sessions/{first}/calls", json={"tool": "ls", "args": {}}).status_code == 200
        for sid in (first, second.json()["id"]):
            assert c.delete(f"/v1/sessions/{sid}").status_code == 204


def test_grants_change_and_are_proved_when_granted(start_server, data, policy_file):
    key = add_tenant("grants", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        exec_ = {"image": "runner/base", "cmd": ["echo", "hi"]}
        assert c.post("/v1/exec", json=exec_).status_code == 403
        bad = refused("update", "grants", "--image", "nosuch/img", "--data", str(data))
        assert "cannot grant image nosuch/img" in bad.stderr and "not on this engine" in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr
        bad = refused("add", "other", "--image", "nosuch/img", "--data", str(data))
        assert "cannot grant image nosuch/img" in bad.stderr
        assert "other" not in tenants("list", data=data)
        assert c.post("/v1/exec", json=exec_).status_code == 403  # the refused update changed nothing
        tenants("update", "grants", "--image", "runner/base", data=data)
        r = c.post("/v1/exec", json=exec_)
        assert r.status_code == 200 and r.json()["stdout"] == "hi\n", r.text

        sid = c.post("/v1/sessions", json={}).json()["id"]
        assert c.post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}}).status_code == 200
        bad = refused("update", "grants", "--policy", "no-such-preset", "--data", str(data))
        assert "no-such-preset" in bad.stderr and "Traceback" not in bad.stderr
        tenants("update", "grants", "--policy", "readonly", data=data)  # the session's policy is taken back
        gone = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}})
        assert gone.status_code == 410 and "no longer granted" in gone.text, gone.text
        assert c.post("/v1/sessions", json={"policy": "tiny"}).status_code == 403
        assert c.post("/v1/sessions", json={}).json()["policy"] == "readonly"
        for s in c.get("/v1/sessions").json()["sessions"]:
            assert c.delete(f"/v1/sessions/{s['id']}").status_code == 204
    refused("update", "grants", "--data", str(data))  # nothing to change
    refused("update", "nobody", "--max-sessions", "3", "--data", str(data))


def test_commands_that_read_never_create_a_database(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "RUNNER_DATA": ""}
    for args in (("list",), ("list", "--json"), ("key", "t"), ("update", "t", "--max-sessions", "2"),
                 ("remove", "t")):
        out = refused(*args, env=env)
        assert "no database at" in out.stderr and "--data" in out.stderr, out.stderr
    elsewhere = tmp_path / "nodata"
    out = refused("list", "--data", str(elsewhere))
    assert "no database at" in out.stderr
    assert list(home.iterdir()) == [] and not elsewhere.exists()
