"""`runner serve`'s pause, resume, snapshots and forks: the real server, a real client, the real engine."""
from __future__ import annotations

import pytest

from .conftest import add_tenant, session_containers

pytestmark = pytest.mark.usefixtures("no_leaks")


def bash(c, sid: str, command: str) -> str:
    r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": command}})
    assert r.status_code == 200, r.text
    return r.json()["content"]


def test_pause_snapshot_restore_and_fork_over_http(start_server, data, policy_file, docker_client):
    key = add_tenant("ta", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        bash(c, sid, "echo kept > f.txt; head -c 100000 /dev/urandom > r.bin; ln -s /etc/hostname l; "
                     "echo tmp > /tmp/t; sha256sum r.bin > sum")
        assert c.post(f"/v1/sessions/{sid}/pause").status_code == 204
        [box] = session_containers(docker_client, sid)
        assert box["State"] == "paused"
        assert bash(c, sid, "echo resumed") == "resumed\n"  # a call resumes it
        assert session_containers(docker_client, sid)[0]["State"] == "running"
        assert c.post(f"/v1/sessions/{sid}/pause").status_code == 204
        assert c.post(f"/v1/sessions/{sid}/resume").status_code == 204
        assert session_containers(docker_client, sid)[0]["State"] == "running"

        r = c.post(f"/v1/sessions/{sid}/snapshots", json={"name": "one"})
        assert r.status_code == 201, r.text
        snap = r.json()["id"]
        listed = c.get("/v1/snapshots").json()["snapshots"]
        assert [(s["id"], s["name"]) for s in listed] == [(snap, "one")]
        assert listed[0]["size"] > 100000 and listed[0]["age"] >= 0
        assert (data / "snapshots" / "ta" / snap / "workspace.tar").is_file()

        new = c.post("/v1/sessions", json={"snapshot": snap})
        assert new.status_code == 201, new.text
        nid = new.json()["id"]
        assert bash(c, nid, "cat f.txt /tmp/t; readlink l; sha256sum -c sum") == "kept\ntmp\n/etc/hostname\nr.bin: OK\n"

        forks = c.post(f"/v1/sessions/{sid}/fork", json={"count": 2})
        assert forks.status_code == 201, forks.text
        fids = forks.json()["sessions"]
        assert len(set(fids)) == 2 and sid not in fids
        for i, fid in enumerate(fids):
            assert session_containers(docker_client, fid)  # ready: its sandbox started
            bash(c, fid, f"echo fork{i} > f.txt")
        assert [bash(c, fid, "cat f.txt /tmp/t") for fid in fids] == ["fork0\ntmp\n", "fork1\ntmp\n"]
        assert bash(c, sid, "cat f.txt") == "kept\n"
        assert [s["id"] for s in c.get("/v1/snapshots").json()["snapshots"]] == [snap]  # the fork's own is gone

        assert c.delete(f"/v1/snapshots/{snap}").status_code == 204
        assert c.get("/v1/snapshots").json()["snapshots"] == []
        assert c.post("/v1/sessions", json={"snapshot": snap}).status_code == 404
        for s in [sid, nid, *fids]:
            assert c.delete(f"/v1/sessions/{s}").status_code == 204


def test_another_tenants_snapshot_is_not_found(start_server, data, policy_file):
    ka, kb = add_tenant("ta", data, policy_file), add_tenant("tb", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(ka) as a, server.client(kb) as b:
        sid = a.post("/v1/sessions", json={}).json()["id"]
        bash(a, sid, "echo secret > s.txt")
        snap = a.post(f"/v1/sessions/{sid}/snapshots", json={}).json()["id"]
        assert b.get("/v1/snapshots").json()["snapshots"] == []
        assert b.get(f"/v1/snapshots/{snap}").status_code == 404
        assert b.delete(f"/v1/snapshots/{snap}").status_code == 404
        assert b.post("/v1/sessions", json={"snapshot": snap}).status_code == 404
        assert b.post(f"/v1/sessions/{sid}/snapshots", json={}).status_code == 404
        assert b.post(f"/v1/sessions/{sid}/pause").status_code == 404
        assert b.post(f"/v1/sessions/{sid}/fork", json={"count": 1}).status_code == 404
        assert b.get("/v1/sessions").json()["sessions"] == []  # no session was made for b
        assert a.get(f"/v1/snapshots/{snap}").json()["id"] == snap
        a.delete(f"/v1/sessions/{sid}")


def test_snapshot_quotas_answer_429_and_413(start_server, data, policy_file):
    key = add_tenant("ta", data, policy_file)
    server = start_server("--data", str(data), env={"RUNNER_SERVE_MAX_SNAPSHOTS": "1"})
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        bash(c, sid, "echo x > x")
        assert c.post(f"/v1/sessions/{sid}/snapshots", json={}).status_code == 201
        r = c.post(f"/v1/sessions/{sid}/snapshots", json={})
        assert r.status_code == 429 and "Retry-After" in r.headers
        c.delete(f"/v1/sessions/{sid}")
    server.stop()
    server = start_server("--data", str(data), env={"RUNNER_SERVE_MAX_SNAPSHOT_BYTES": "1000"})
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        r = c.post(f"/v1/sessions/{sid}/snapshots", json={})
        assert r.status_code == 413, r.text
        c.delete(f"/v1/sessions/{sid}")


def test_a_removed_tenants_snapshots_and_volumes_go_with_it(start_server, data, policy_file):
    from .conftest import tenants

    key = add_tenant("ta", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        bash(c, sid, "echo x > x")
        snap = c.post(f"/v1/sessions/{sid}/snapshots", json={}).json()["id"]
        assert c.post("/v1/volumes", json={"name": "v"}).status_code == 201
    assert (data / "snapshots" / "ta" / snap).is_dir() and (data / "volumes" / "ta" / "v").is_dir()
    server.stop()
    tenants("remove", "ta", data=data)
    assert not (data / "snapshots" / "ta").exists() and not (data / "volumes" / "ta").exists()


def test_remote_runner_pauses_snapshots_and_forks_as_runner_does(start_server, data, policy_file, docker_client):
    from runner.client import RemoteRunner

    key = add_tenant("ta", data, policy_file)
    server = start_server("--data", str(data))
    with RemoteRunner(server.url, key) as r:
        r.call("bash", {"command": "echo remote > f.txt"})
        assert r.pause() is True
        assert session_containers(docker_client, r.session_id)[0]["State"] == "paused"
        assert r.call("bash", {"command": "cat f.txt"}).content == "remote\n"
        snap = r.snapshot("remote")
        with RemoteRunner(server.url, key, snapshot=snap) as r2:
            assert r2.call("bash", {"command": "cat f.txt"}).content == "remote\n"
        [f] = r.fork(1)
        try:
            assert f.session_id != r.session_id
            assert f.call("bash", {"command": "cat f.txt"}).content == "remote\n"
        finally:
            f.close()


def test_pause_after_pauses_an_idle_session_and_its_next_call_resumes_it(start_server, data, policy_file,
                                                                         docker_client):
    from .conftest import wait_for

    key = add_tenant("ta", data, policy_file)
    server = start_server("--data", str(data), "--pause-after", "1")
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        bash(c, sid, "echo before > f.txt")
        wait_for(lambda: session_containers(docker_client, sid)[0]["State"] == "paused", 60)
        assert bash(c, sid, "cat f.txt") == "before\n"
        assert session_containers(docker_client, sid)[0]["State"] == "running"
        c.delete(f"/v1/sessions/{sid}")


def test_volumes_outlive_sessions_belong_to_a_tenant_and_mount_once_read_write(start_server, data, policy_file,
                                                                              docker_client):
    ka, kb = add_tenant("ta", data, policy_file), add_tenant("tb", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(ka) as a, server.client(kb) as b:
        assert a.post("/v1/volumes", json={"name": "cache"}).status_code == 201
        assert a.post("/v1/volumes", json={"name": "cache"}).status_code == 409
        assert a.post("/v1/volumes", json={"name": "../x"}).status_code == 422
        s1 = a.post("/v1/sessions", json={"volumes": {"cache": "/data"}})
        assert s1.status_code == 201, s1.text
        s1 = s1.json()["id"]
        assert bash(a, s1, "echo kept > /data/f; cat /data/f") == "kept\n"
        # read-write by one open session at a time; read-only then refused too
        assert a.post("/v1/sessions", json={"volumes": {"cache": "/data"}}).status_code == 409
        assert a.post("/v1/sessions", json={"volumes": {"cache": "/data:ro"}}).status_code == 409
        assert a.delete("/v1/volumes/cache").status_code == 409
        # another tenant's volume does not exist for it
        assert b.post("/v1/sessions", json={"volumes": {"cache": "/data"}}).status_code == 404
        assert b.get("/v1/volumes").json()["volumes"] == []
        assert b.delete("/v1/volumes/cache").status_code == 404
        [vol] = a.get("/v1/volumes").json()["volumes"]
        assert vol["name"] == "cache" and vol["mounted_by"] == [s1] and vol["size"] > 0
        assert a.delete(f"/v1/sessions/{s1}").status_code == 204
        # it outlived the session; now two read-only sessions may share it
        ro = [a.post("/v1/sessions", json={"volumes": {"cache": "/mnt/c:ro"}}).json()["id"] for _ in range(2)]
        for sid in ro:
            assert bash(a, sid, "cat /mnt/c/f") == "kept\n"
            assert "Read-only" in bash(a, sid, "echo x > /mnt/c/g 2>&1 || true")
        assert a.post("/v1/sessions", json={"volumes": {"cache": "/data"}}).status_code == 409
        for sid in ro:
            a.delete(f"/v1/sessions/{sid}")
        assert a.delete("/v1/volumes/cache").status_code == 204
        assert a.get("/v1/volumes").json()["volumes"] == []


def test_hibernate_after_frees_the_sandbox_and_the_next_call_gets_tmp_back_even_after_a_restart(
        start_server, data, policy_file, docker_client):
    from .conftest import wait_for

    key = add_tenant("ta", data, policy_file)
    server = start_server("--data", str(data), "--hibernate-after", "1")
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        bash(c, sid, "echo ws > f.txt; echo one > /tmp/t")
        wait_for(lambda: not session_containers(docker_client, sid), 60, "the sandbox removed")
        assert (data / "hibernated" / sid / "tmp.tar").is_file()
        assert bash(c, sid, "cat f.txt /tmp/t") == "ws\none\n"  # woken: a fresh sandbox, its /tmp back
        assert not (data / "hibernated" / sid).exists()  # (taken: a restart will not bring it back again)
        bash(c, sid, "echo two > /tmp/t")
        wait_for(lambda: not session_containers(docker_client, sid), 60, "the sandbox removed again")
    server.stop()
    server = start_server("--data", str(data))
    with server.client(key) as c:
        assert bash(c, sid, "cat f.txt /tmp/t") == "ws\ntwo\n"
        c.delete(f"/v1/sessions/{sid}")
    assert not (data / "hibernated" / sid).exists()


def test_the_state_routes_take_a_place_at_the_tenants_gate(start_server, data, policy_file):
    """--max-calls-per-tenant 1 and one call running: the state and volume routes answer 429, as
    every route does (they ran on the worker threads past the gate, so one tenant could hold them
    all with snapshots, forks and volume walks); another tenant is not held. The running call
    waits for a file the test makes in its workspace, not for the clock."""
    import threading

    ka, kb = add_tenant("ta", data, policy_file), add_tenant("tb", data, policy_file)
    server = start_server("--data", str(data), "--max-calls-per-tenant", "1")
    with server.client(ka) as a, server.client(kb) as b:
        sid = a.post("/v1/sessions", json={}).json()["id"]
        ws = data / "workspaces" / "ta" / sid
        running = threading.Thread(target=bash, args=(a, sid, ": > began; until [ -e go ]; do sleep 0.05; done"))
        running.start()
        try:
            while not (ws / "began").exists():
                running.join(0.05)
                assert running.is_alive(), "the call ended before it began"
            for method, path in (("get", "/v1/snapshots"), ("get", "/v1/volumes"),
                                 ("post", f"/v1/sessions/{sid}/snapshots"), ("post", f"/v1/sessions/{sid}/pause")):
                r = a.request(method, path, **({"json": {}} if method == "post" else {}))
                assert r.status_code == 429 and "--max-calls-per-tenant" in r.text, (path, r.status_code, r.text)
            assert b.get("/v1/snapshots").status_code == 200
        finally:
            (ws / "go").touch()
            running.join()
        a.delete(f"/v1/sessions/{sid}")
