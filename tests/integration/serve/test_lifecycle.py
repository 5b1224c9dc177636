"""Sessions' lifecycle: idle timeout, maximum lifetime, and a server killed under load (issue 15's
"`runner serve` killed under load"): after a restart every acknowledged session still works or
answers that it is gone, and no container is orphaned."""
from __future__ import annotations

import os
import signal
import threading

import httpx
import pytest

from runner.controller import channel

from ...leftovers import result_stores
from .conftest import add_tenant, session_containers, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_an_idle_session_ends_and_its_sandbox_and_workspace_go(start_server, data, policy_file, docker_client):
    key = add_tenant("idle", data, policy_file)
    server = start_server("--data", str(data), "--idle-timeout", "2")
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        assert c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "true"}}).status_code == 200
        assert session_containers(docker_client, sid)
        wait_for(lambda: c.get(f"/v1/sessions/{sid}").status_code == 410, 60, "the idle session ended")
        assert "idle timeout" in c.get(f"/v1/sessions/{sid}").json()["detail"]
        # the row is closed first (no instance serves it after that), then the sandbox and workspace go
        wait_for(lambda: not session_containers(docker_client, sid), 30, "its sandbox removed")
        wait_for(lambda: not (data / "workspaces" / "idle" / sid).exists(), 30, "its workspace removed")


def test_a_busy_session_still_ends_at_its_maximum_lifetime(start_server, data, policy_file, docker_client):
    key = add_tenant("old", data, policy_file)
    server = start_server("--data", str(data), "--max-lifetime", "3")
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]

        def used_until_gone():
            return c.post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}}).status_code == 410
        wait_for(used_until_gone, 60, "the session ended at its lifetime")
        assert "maximum lifetime" in c.get(f"/v1/sessions/{sid}").json()["detail"]
        wait_for(lambda: not session_containers(docker_client, sid), 30, "its sandbox removed")


def test_a_session_running_a_call_ends_at_its_maximum_lifetime(start_server, data, policy_file, docker_client):
    key = add_tenant("busy", data, policy_file)
    server = start_server("--data", str(data), "--max-lifetime", "3")
    with server.client(key) as c, server.client(key) as caller:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        out = {}
        call = threading.Thread(target=lambda: out.setdefault("r", caller.post(
            f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "sleep 600", "timeout": 700}})))
        call.start()
        wait_for(lambda: c.get(f"/v1/sessions/{sid}").status_code == 410, 60, "the busy session ended at its lifetime")
        assert "maximum lifetime" in c.get(f"/v1/sessions/{sid}").json()["detail"]
        call.join(120)
        r = out["r"]  # the call ended with its sandbox: 410, or its result saying so (never a sleep run out)
        assert r.status_code == 410 or (r.status_code == 200 and r.json()["is_error"]
                                        and ("the sandbox died" in r.json()["content"]
                                             or r.json()["meta"].get("cancelled"))), r.text
        wait_for(lambda: not session_containers(docker_client, sid), 30, "its sandbox removed")


def test_a_server_killed_under_load_loses_no_session_and_orphans_no_container(start_server, data, policy_file,
                                                                               docker_client):
    keys = {t: add_tenant(t, data, policy_file) for t in ("k1", "k2")}
    server = start_server("--data", str(data))
    acked: dict[str, str] = {}  # session id -> tenant: every 201 the clients received
    for t, key in keys.items():
        with server.client(key) as c:
            for _ in range(3):
                r = c.post("/v1/sessions", json={})
                assert r.status_code == 201
                acked[r.json()["id"]] = t
    with server.client(keys["k1"]) as c:  # an output kept whole in the session's result store
        r = c.post(f"/v1/sessions/{next(iter(acked))}/calls", json={"tool": "bash", "args": {"command": "seq 1000"}})
        assert r.status_code == 200 and r.json()["meta"]["truncated"], r.text
    stop = threading.Event()
    done = {sid: 0 for sid in acked}

    def load(sid, key):  # calls until the server dies under it
        with server.client(key) as c:
            n = 0
            while not stop.is_set():
                try:
                    r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {
                        "command": f"echo {n} >> log.txt; sleep 0.1"}})
                except httpx.HTTPError:
                    return
                if r.status_code == 200:
                    done[sid] += 1
                n += 1
    threads = [threading.Thread(target=load, args=(sid, keys[t])) for sid, t in acked.items()]
    for th in threads:
        th.start()
    wait_for(lambda: all(done.values()), 120, "every session served a call")
    old_pid = server.proc.pid
    assert any(session_containers(docker_client, sid) for sid in acked)
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    stop.set()
    for th in threads:
        th.join()
    # the dead server's sandboxes are still there until a server starts again
    left = [c for sid in acked for c in session_containers(docker_client, sid)]
    assert left and all(c["Labels"]["runner.owner.pid"] == str(old_pid) for c in left)
    assert result_stores(old_pid) == []  # a session's kept output lives under --data (test_session_state.py)
    os.makedirs(channel.BASE, mode=0o711, exist_ok=True)
    untaken = os.path.join(channel.BASE, f"{old_pid}-untaken")  # as a sandbox's whose agent never connected
    os.mkdir(untaken, 0o700)

    again = start_server("--data", str(data))
    for sid in acked:  # reaped at start: their agents' channels died with the old process
        assert session_containers(docker_client, sid) == []
    assert not os.path.exists(untaken)  # and its agent-socket directories
    for sid, t in acked.items():
        with again.client(keys[t]) as c:
            r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "wc -l < log.txt"}})
            assert r.status_code in (200, 410), r.text
            if r.status_code == 200:  # the same workspace, a fresh sandbox
                assert not r.json()["is_error"] and int(r.json()["content"]) >= 1, r.text
            assert c.delete(f"/v1/sessions/{sid}").status_code in (204, 410)
    again.stop()
    assert [c for sid in acked for c in session_containers(docker_client, sid)] == []
