"""One tenant's load against the others: worker threads, a session's queue of calls, and what
the calls in flight get when their session or the server ends."""
from __future__ import annotations

import threading

import pytest

from .conftest import add_tenant, session_containers, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")

FLOOD = 70  # more calls than the server has worker threads (64)
PER_TENANT = 16  # runner serve's default --max-calls-per-tenant


def flood(server, key: str, sid: str, n: int, command: str) -> tuple[list, list[threading.Thread]]:
    """n calls of `command` on the session at once, each from a client of its own: ([(status, body)], threads)."""
    results: list = []

    def one():
        with server.client(key) as c:
            r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": command, "timeout": 700}})
            results.append((r.status_code, r.text))
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    return results, threads


def running(docker_client, sid: str, command: str) -> bool:
    """Whether a process of the session's sandbox runs that command line."""
    for c in session_containers(docker_client, sid):
        try:
            top = docker_client.api.top(c["Id"], ps_args="-o pid,args")
        except Exception:  # not running (yet, or any more)
            continue
        if any(command in " ".join(p) for p in top.get("Processes") or []):
            return True
    return False


def test_one_tenant_flooding_a_session_stalls_no_other_tenant(start_server, data, policy_file, docker_client):
    keys = {t: add_tenant(t, data, policy_file) for t in ("flood", "calm")}
    server = start_server("--data", str(data))
    with server.client(keys["flood"]) as a, server.client(keys["calm"], timeout=30) as b:
        sid = a.post("/v1/sessions", json={}).json()["id"]
        results, threads = flood(server, keys["flood"], sid, FLOOD, "sleep 600")
        # past its maximum of calls in flight the tenant is refused at once, with a reason
        wait_for(lambda: sum(s == 429 for s, _ in results) == FLOOD - PER_TENANT, 60, "the excess calls refused")
        refused = next(body for s, body in results if s == 429)
        assert "calls in flight" in refused and "--max-calls-per-tenant" in refused, refused
        # the other tenant is served meanwhile: key checks, the database, and a call of its own
        assert b.get("/v1/health").status_code == 200
        assert b.get("/v1/sessions").status_code == 200
        other = b.post("/v1/sessions", json={}).json()["id"]
        r = b.post(f"/v1/sessions/{other}/calls", json={"tool": "bash", "args": {"command": "echo served"}})
        assert r.status_code == 200 and r.json()["content"] == "served\n", r.text
        assert b.delete(f"/v1/sessions/{other}").status_code == 204
        # ending the flooded session ends its running call and the queued ones
        assert a.delete(f"/v1/sessions/{sid}").status_code == 204
        for t in threads:
            t.join(120)
        assert len(results) == FLOOD
        assert not session_containers(docker_client, sid)


def test_calls_queued_behind_a_running_one_answer_410_when_the_session_is_deleted(start_server, data, policy_file,
                                                                                   docker_client):
    key = add_tenant("queued", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        results, threads = flood(server, key, sid, 4, "sleep 600; echo ran > ran.txt")
        wait_for(lambda: session_containers(docker_client, sid), 60, "the first call's sandbox")
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
        for t in threads:
            t.join(120)
    gone = [body for status, body in results if status == 410]
    assert len(gone) >= 3 and all("ended" in body for body in gone), results
    assert {status for status, _ in results} <= {200, 410}, results
    assert not (data / "workspaces" / "queued" / sid).exists()


def test_sigterm_stops_the_calls_in_flight_with_503_and_removes_their_sandboxes(start_server, data, policy_file,
                                                                                docker_client):
    key = add_tenant("stopped", data, policy_file, "--image", "runner/base")
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        assert c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "true"}}).status_code == 200
    results, threads = flood(server, key, sid, 2, "sleep 60")  # one runs, one waits for its turn

    def exec_():
        with server.client(key) as c:
            r = c.post("/v1/exec", json={"image": "runner/base", "cmd": ["sleep", "60"]})
            results.append((r.status_code, r.text))
    threads.append(threading.Thread(target=exec_))
    threads[-1].start()
    wait_for(lambda: running(docker_client, sid, "sleep 60"), 60, "the first call running")
    wait_for(lambda: docker_client.api.containers(filters={"label": ["runner.role=serve-exec",
                                                                     "runner.tenant=stopped"]}), 60, "the exec")
    assert server.stop() == 0
    for t in threads:
        t.join(120)
    assert [s for s, _ in results] == [503] * 3, results
    assert all("shutting down" in body for _, body in results), results
    assert not session_containers(docker_client, sid)
