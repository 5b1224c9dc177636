"""The /v1 contract against the real server: every status code, cross-tenant attempts on every
route, files under the tools' path rules, streaming, exec, key rotation and the audit's tenant."""
from __future__ import annotations

import json
import subprocess

import httpx
import pytest

from .conftest import add_tenant, fresh_minute, runner_argv, session_containers, tenant_containers, tenants, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def two(start_server, data, policy_file):
    """A server with tenants acme and beta (keys in .keys)."""
    acme = add_tenant("acme", data, policy_file, "--image", "runner/base")
    beta = add_tenant("beta", data, policy_file)
    server = start_server("--data", str(data), "--max-body", "200000")
    server.keys = {"acme": acme, "beta": beta}
    return server


def routes(sid: str) -> list[tuple[str, str, dict]]:
    """Every route with a session in it, with a well-formed request."""
    return [("GET", f"/v1/sessions/{sid}", {}), ("DELETE", f"/v1/sessions/{sid}", {}),
            ("POST", f"/v1/sessions/{sid}/calls", {"json": {"tool": "ls", "args": {}}}),
            ("POST", f"/v1/sessions/{sid}/calls?stream=true", {"json": {"tool": "bash", "args": {"command": "id"}}}),
            ("PUT", f"/v1/sessions/{sid}/files/x.txt", {"content": b"x"}),
            ("GET", f"/v1/sessions/{sid}/files/a.txt", {})]


def test_health_is_open_and_every_other_route_needs_a_key(two):
    with two.client() as c:
        assert c.get("/v1/health").json()["status"] == "ok"
        for method, path, kw in routes("s0") + [("GET", "/v1/tools", {}), ("GET", "/v1/sessions", {}),
                                               ("POST", "/v1/sessions", {"json": {}}),
                                               ("POST", "/v1/exec", {"json": {"image": "runner/base", "cmd": ["id"]}})]:
            for headers in ({}, {"Authorization": "Bearer rk_0000_nope"}, {"Authorization": "Basic abc"},
                            {"Authorization": "Bearer " + two.keys["acme"] + "x"}):
                r = c.request(method, path, headers=headers, **kw)
                assert r.status_code == 401, (method, path, headers, r.text)
                assert r.headers["www-authenticate"] == "Bearer"
    assert "/v1/sessions/{sid}/calls" in httpx.get(two.url + "/openapi.json").json()["paths"]


def test_a_session_runs_calls_moves_files_and_is_removed(two, data, docker_client):
    with two.client(two.keys["acme"]) as c:
        tools = c.get("/v1/tools").json()
        assert {"read", "bash", "write"} <= {t["name"] for t in tools}
        r = c.post("/v1/sessions", json={})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        assert [s["id"] for s in c.get("/v1/sessions").json()["sessions"]] == [sid]
        assert c.put(f"/v1/sessions/{sid}/files/dir/in.bin", content=b"\x00\xffraw").status_code == 204
        res = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {
            "command": "od -An -c dir/in.bin | tr -s ' '; printf 'out\\n' > out.txt; id -u"}})
        assert res.status_code == 200 and not res.json()["is_error"], res.text
        assert "\\0 377 r a w" in res.json()["content"] and "\n0\n" not in res.json()["content"]
        assert c.get(f"/v1/sessions/{sid}/files/out.txt").content == b"out\n"
        err = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "read", "args": {"path": "missing.txt"}})
        assert err.status_code == 200 and err.json()["is_error"] is True
        # the sandbox carries the tenant's label
        assert [c_["Labels"]["runner.tenant"] for c_ in session_containers(docker_client, sid)] == ["acme"]
        ws = two_workspace(two, "acme", sid)
        assert ws.is_dir()
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
        assert session_containers(docker_client, sid) == []
        assert not ws.exists()
        gone = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}})
        assert gone.status_code == 410 and "ended" in gone.json()["detail"]
    audit = [json.loads(line) for line in open(data / "audit.jsonl") if sid in line]  # the server's own log
    assert audit and {rec.get("tenant") for rec in audit} == {"acme"}


def two_workspace(server, tenant, sid):
    from pathlib import Path

    data = Path(server.proc.args[server.proc.args.index("--data") + 1])
    return data / "workspaces" / tenant / sid


def test_another_tenants_session_is_404_on_every_route(two, docker_client):
    with two.client(two.keys["acme"]) as a, two.client(two.keys["beta"]) as b:
        sid = a.post("/v1/sessions", json={}).json()["id"]
        assert a.put(f"/v1/sessions/{sid}/files/a.txt", content=b"acme's").status_code == 204
        for method, path, kw in routes(sid):
            r = b.request(method, path, **kw)
            assert r.status_code == 404, (method, path, r.text)
            assert "acme" not in r.text
        assert b.get("/v1/sessions").json()["sessions"] == []
        # the session is untouched
        assert a.get(f"/v1/sessions/{sid}/files/a.txt").content == b"acme's"
        assert a.get(f"/v1/sessions/{sid}/files/x.txt").status_code == 404
        assert a.delete(f"/v1/sessions/{sid}").status_code == 204


def test_bodies_over_the_limit_are_413_and_malformed_ones_422_naming_the_field(two):
    with two.client(two.keys["acme"]) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        big = {"tool": "write", "args": {"path": "big.txt", "content": "x" * 300_000}}
        assert c.post(f"/v1/sessions/{sid}/calls", json=big).status_code == 413

        def chunks():  # no Content-Length: the limit holds on what streams in
            for _ in range(30):
                yield b"x" * 10_000
        assert c.put(f"/v1/sessions/{sid}/files/f.bin", content=chunks()).status_code == 413
        over_write = c.put(f"/v1/sessions/{sid}/files/f.bin", content=b"x" * 70_000)  # the policy's max_write 64k
        assert over_write.status_code == 413 and "max_write" in over_write.text
        for body, field in (({"tool": 1}, "tool"), ({"args": {}}, "tool"), ({"tool": "ls", "args": []}, "args"),
                            ({"tool": "ls", "extra": 1}, "extra")):
            r = c.post(f"/v1/sessions/{sid}/calls", json=body)
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", field], r.text
        for raw in (b'{"tool":', b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000):
            r = c.post(f"/v1/sessions/{sid}/calls", content=raw, headers={"Content-Type": "application/json"})
            assert r.status_code in (413, 422), r.text
            if r.status_code == 422:
                assert r.json()["detail"][0]["type"] == "json_invalid"
        r = c.post("/v1/sessions", json={"policy": 7})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "policy"]
        assert c.get("/v1/health").status_code == 200  # the server lives on
        c.delete(f"/v1/sessions/{sid}")


def test_quotas_answer_429_with_retry_after(start_server, data, policy_file):
    key = add_tenant("tight", data, policy_file, "--max-sessions", "1", "--calls-per-minute", "2")
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        full = c.post("/v1/sessions", json={})
        assert full.status_code == 429 and int(full.headers["retry-after"]) > 0
        fresh_minute()
        codes = [c.post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}}).status_code for _ in range(3)]
        assert codes[:2] == [200, 200] and codes[2] == 429
        r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "ls", "args": {}})
        assert r.status_code == 429 and 0 < int(r.headers["retry-after"]) <= 60
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
        assert c.post("/v1/sessions", json={}).status_code == 201  # room again
        for s in c.get("/v1/sessions").json()["sessions"]:
            c.delete(f"/v1/sessions/{s['id']}")


def test_no_tenant_names_a_policy_or_image_it_was_not_granted(two, policy_file):
    with two.client(two.keys["beta"]) as c:
        for name in ("default", "local-dev", str(policy_file), "/etc/passwd", "../tiny"):
            r = c.post("/v1/sessions", json={"policy": name})
            assert r.status_code == 403, (name, r.text)
        assert c.get("/v1/tools", params={"policy": "local-dev"}).status_code == 403
        r = c.post("/v1/exec", json={"image": "runner/base", "cmd": ["id"]})
        assert r.status_code == 403 and "not granted" in r.text
        ok = c.post("/v1/sessions", json={"policy": "tiny"})
        assert ok.status_code == 201
        c.delete(f"/v1/sessions/{ok.json()['id']}")
    with two.client(two.keys["acme"]) as c:
        assert c.post("/v1/exec", json={"image": "busybox", "cmd": ["id"]}).status_code == 403
        r = c.post("/v1/exec", json={"image": "runner/base", "cmd": ["sh", "-c", "echo hi; id -u; exit 3"]})
        assert r.status_code == 200, r.text
        assert r.json()["exit_code"] == 3 and r.json()["stdout"].split() == ["hi", "1000"]


def test_files_follow_the_tools_path_rules(two):
    with two.client(two.keys["acme"]) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        plant = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": (
            "ln -s /etc/passwd link; ln -s /etc dirlink; mkfifo fifo; mkdir -p .git/hooks; echo x > real")}})
        assert not plant.json()["is_error"], plant.text
        for path in ("link", "dirlink/passwd", "fifo"):
            r = c.get(f"/v1/sessions/{sid}/files/{path}")
            assert r.status_code == 422 and "root:" not in r.text, (path, r.text)
        for path in ("link", "dirlink/new.txt", "fifo"):
            assert c.put(f"/v1/sessions/{sid}/files/{path}", content=b"evil").status_code == 422, path
        r = c.put(f"/v1/sessions/{sid}/files/.git/hooks/pre-commit", content=b"#!/bin/sh\n")
        assert r.status_code == 403, r.text
        # '..' never leaves the workspace (sent raw: clients normalise it away)
        for raw in (f"/v1/sessions/{sid}/files/..%2F..%2Fetc%2Fpasswd", f"/v1/sessions/{sid}/files/a/%2e%2e/%2e%2e/x"):
            r = c.get(httpx.URL(two.url + raw))
            assert r.status_code in (404, 422) and "root:" not in r.text, (raw, r.text)
        assert c.get(f"/v1/sessions/{sid}/files/real").content == b"x\n"
        assert open("/etc/passwd", "rb").read() != b"evil"
        c.delete(f"/v1/sessions/{sid}")


def test_streamed_output_then_the_result(two):
    with two.client(two.keys["acme"]) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        events = []
        body = {"tool": "bash", "args": {"command": "for i in 1 2 3; do echo line$i; sleep 0.2; done"}}
        with c.stream("POST", f"/v1/sessions/{sid}/calls", params={"stream": "true"}, json=body) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            name = None
            for line in r.iter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    events.append((name, json.loads(line[6:])))
        assert events[-1][0] == "result" and events[-1][1]["content"] == "line1\nline2\nline3\n"
        assert "".join(d["text"] for n, d in events if n == "output") == "line1\nline2\nline3\n"
        c.delete(f"/v1/sessions/{sid}")


def test_a_client_that_disconnects_mid_stream_ends_the_call_and_the_session_goes_on(two, docker_client):
    with two.client(two.keys["acme"]) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        body = {"tool": "bash", "args": {"command": "echo started; sleep 600", "timeout": 700}}
        with c.stream("POST", f"/v1/sessions/{sid}/calls", params={"stream": "true"}, json=body) as r:
            for line in r.iter_lines():
                if "started" in line:
                    break
        # the call's sandbox is removed; the session's next call runs (it would wait 600 s otherwise)
        wait_for(lambda: not session_containers(docker_client, sid), 60, "the streaming call's sandbox removed")
        with two.client(two.keys["acme"]) as c2:
            res = c2.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "echo again"}})
        assert res.status_code == 200 and res.json()["content"] == "again\n", res.text
        c.delete(f"/v1/sessions/{sid}")


def test_a_client_that_leaves_while_its_call_waits_for_its_turn_stops_only_that_call(two, docker_client):
    """The streaming call that never ran is dropped; the call running ahead of it, another
    client's, keeps its sandbox and ends as it would have (it was removed under it before)."""
    with two.client(two.keys["acme"]) as c, two.client(two.keys["acme"]) as c2:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        ahead = {"tool": "bash", "args": {"command": "echo started; sleep 3; echo ok"}}
        queued = {"tool": "bash", "args": {"command": "echo queued-ran > queued.txt"}}
        events: list[tuple[str, dict]] = []
        with c.stream("POST", f"/v1/sessions/{sid}/calls", params={"stream": "true"}, json=ahead) as r:
            lines = r.iter_lines()
            for line in lines:
                if "started" in line:
                    break
            with c2.stream("POST", f"/v1/sessions/{sid}/calls", params={"stream": "true"}, json=queued) as q:
                assert q.status_code == 200  # accepted: it waits for the running call's turn
            name = None
            for line in lines:
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    events.append((name, json.loads(line[6:])))
        assert events[-1][0] == "result", events
        assert not events[-1][1]["is_error"] and events[-1][1]["content"] == "started\nok\n", events[-1]
        res = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "cat queued.txt; echo next"}})
        assert res.status_code == 200 and res.json()["content"].endswith("next\n"), res.text
        assert "queued-ran" not in res.json()["content"]  # the call whose client left never ran
        c.delete(f"/v1/sessions/{sid}")


def test_a_new_key_replaces_the_old_at_once_in_the_running_server(two, data):
    with two.client(two.keys["beta"]) as c:
        assert c.get("/v1/sessions").status_code == 200
        new = tenants("key", "beta", data=data).strip()
        assert new.startswith("rk_") and new != two.keys["beta"]
        assert c.get("/v1/sessions").status_code == 401
    with two.client(new) as c:
        assert c.get("/v1/sessions").status_code == 200


def test_tenants_cli_prints_the_key_alone_and_remove_closes_sessions(two, data, docker_client):
    rows = json.loads(tenants("list", "--json", data=data))
    assert {r["name"] for r in rows} == {"acme", "beta"}
    out = subprocess.run(runner_argv("tenants", "add", "acme", "--data", str(data)), capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout == "" and "exists" in out.stderr
    with two.client(two.keys["acme"]) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        assert c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": "true"}}).status_code == 200
        assert tenant_containers(docker_client, "acme")
        tenants("remove", "acme", data=data)
        assert c.get("/v1/sessions").status_code == 401
        assert not two_workspace(two, "acme", sid).exists()
        wait_for(lambda: not tenant_containers(docker_client, "acme"), 60, "acme's sandboxes removed")


def test_a_name_too_long_or_a_command_no_process_can_have_is_422_and_starts_nothing(two, docker_client):
    import time

    with two.client(two.keys["acme"]) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        for name in ("x" * 300, "dir/" + "é" * 128):
            for r in (c.put(f"/v1/sessions/{sid}/files/{name}", content=b"hi"), c.get(f"/v1/sessions/{sid}/files/{name}")):
                assert r.status_code == 422 and "255 bytes" in r.json()["detail"][0]["msg"], r.text
        since = int(time.time()) - 1
        for cmd, msg in ((["echo", "a\x00b"], "NUL"), ([""], "argv[0] must not be empty")):
            r = c.post("/v1/exec", json={"image": "runner/base", "cmd": cmd})
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"] == ["body", "cmd"] and msg in r.json()["detail"][0]["msg"], r.text
        made = docker_client.events(since=since, until=int(time.time()) + 1, decode=True,
                                    filters={"type": "container", "event": "create", "label": "runner.role=serve-exec"})
        assert [e for e in made if e["Actor"]["Attributes"].get("runner.tenant") == "acme"] == []
        assert c.get("/v1/health").status_code == 200
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
