"""A session's state between calls under `runner serve` (issue 50): one sandbox for the session's
life by default, whatever lifecycle its policy names (the multi-tenant preset says per-call), a
fresh sandbox per call as the explicit choice; call ids and kept output that outlive a server
killed with SIGKILL."""
from __future__ import annotations

import signal

import pytest

from .conftest import add_tenant, session_containers, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


def bash(c, sid: str, command: str) -> dict:
    r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": command}})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_session_keeps_its_sandbox_between_calls_by_default(start_server, data, docker_client):
    # the multi-tenant preset (the default grant) names a fresh sandbox per call
    key = add_tenant("keeps", data, "multi-tenant")
    server = start_server("--data", str(data))
    with server.client(key) as c:
        r = c.post("/v1/sessions", json={})
        assert r.status_code == 201, r.text
        made = r.json()
        assert made["sandbox"] == "session" and "/tmp" in made["note"] and "per-call" in made["note"]
        sid = made["id"]
        first = bash(c, sid, "echo kept > /tmp/state; (sleep 300 &) ; hostname")
        assert not first["is_error"], first
        second = bash(c, sid, "cat /tmp/state; pgrep -x sleep >/dev/null && echo running; hostname")
        assert not second["is_error"], second
        lines = second["content"].split()
        assert lines[:2] == ["kept", "running"], second
        assert lines[2] == first["content"].strip()  # the same sandbox's hostname
        assert len(session_containers(docker_client, sid)) == 1
        got = c.get(f"/v1/sessions/{sid}").json()
        assert got["sandbox"] == "session" and got["calls"] == 2
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
    wait_for(lambda: not session_containers(docker_client, sid), 30, "its sandbox removed")


def test_a_per_call_session_starts_each_call_in_a_fresh_sandbox(start_server, data, policy_file):
    # the test policy names one sandbox per session: the session's choice wins
    key = add_tenant("fresh", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        r = c.post("/v1/sessions", json={"sandbox": "per-call"})
        assert r.status_code == 201, r.text
        assert r.json()["sandbox"] == "per-call" and "fresh sandbox per call" in r.json()["note"]
        sid = r.json()["id"]
        bash(c, sid, "echo kept > /tmp/state; echo ws > inws")
        second = bash(c, sid, "cat /tmp/state 2>/dev/null || echo none; cat inws")
        assert second["content"].split() == ["none", "ws"], second  # only the workspace carried over
        assert c.post("/v1/sessions", json={"sandbox": "forever"}).status_code == 422
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204


def test_remote_runner_chooses_the_sandbox(start_server, data, policy_file):
    from runner.client import RemoteRunner

    key = add_tenant("remote", data, policy_file)
    server = start_server("--data", str(data))
    for sandbox, second in (("per-call", "none"), (None, "kept")):
        with RemoteRunner(server.url, key, sandbox=sandbox) as r:
            assert ("fresh sandbox per call" if sandbox else "one sandbox for the session's life") in r.note
            r.call("bash", {"command": "echo kept > /tmp/state"})
            got = r.call("bash", {"command": "cat /tmp/state 2>/dev/null || echo none"})
            assert got.text.strip() == second, got


def test_call_ids_and_kept_output_outlive_a_killed_server(start_server, data, policy_file, docker_client):
    key = add_tenant("killed9", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        big = bash(c, sid, "seq 1 5000")  # past the answer's caps: kept whole for the result tool
        assert big["meta"]["truncated"] and big["meta"]["call_id"] == "c1", big["meta"]
        assert bash(c, sid, "true")["meta"]["call_id"] == "c2"
    kept = data / "kept" / "killed9" / sid
    assert (kept / "c1.out").is_file()  # under --data, not in a temporary directory of the process
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()

    again = start_server("--data", str(data))
    with again.client(key) as c:
        after = bash(c, sid, "true")
        assert after["meta"]["call_id"] == "c3", after["meta"]  # not c1 again
        page = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "result",
                                                         "args": {"call_id": "c1", "offset": 4990, "limit": 20}})
        assert page.status_code == 200, page.text
        res = page.json()
        assert not res["is_error"], res
        assert res["content"].splitlines()[:11] == [str(n) for n in range(4990, 5001)], res
        assert res["meta"]["call_id"] == "c4"
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
    wait_for(lambda: not kept.exists(), 30, "the kept output removed with the session")
    wait_for(lambda: not session_containers(docker_client, sid), 30, "its sandbox removed")
