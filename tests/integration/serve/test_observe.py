"""What an operator watches on `runner serve` (issue 50): /metrics in Prometheus' text format,
/v1/ready, the JSON log on stderr, the server's own audit log and `runner audit tail`'s filters
and -f; the Grafana dashboard in examples/ queries only metrics that exist. The real server on
loopback, a real HTTP client, tenants made with the real command."""
from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import threading
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from .conftest import add_tenant, runner_argv, wait_for

ROOT = Path(__file__).resolve().parents[3]


def scrape(server, headers: dict | None = None) -> dict[str, list]:
    """The samples of GET /metrics by sample name (runner_tool_calls_total, ..._bucket, ...)."""
    r = httpx.get(server.url + "/metrics", headers=headers or {}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(r.text):
        out.setdefault(fam.name, [])
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def value(samples: dict, name: str, **labels) -> float:
    return sum(s.value for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items()))


def new_session(c: httpx.Client) -> str:
    r = c.post("/v1/sessions", json={})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def call(c: httpx.Client, sid: str, tool: str, args: dict) -> dict:
    r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": tool, "args": args})
    assert r.status_code == 200, r.text
    return r.json()


def test_metrics_count_each_tenants_calls_errors_sessions_and_responses(start_server, data, policy_file):
    ka, kb = add_tenant("obs-a", data, policy_file), add_tenant("obs-b", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(ka) as a, server.client(kb) as b, server.client("rk_nosuch_key") as bad:
        sa, sb = new_session(a), new_session(b)
        assert call(a, sa, "bash", {"command": "echo one"})["is_error"] is False
        assert call(a, sa, "bash", {"command": "echo two"})["is_error"] is False
        assert call(a, sa, "nosuch", {})["meta"]["error_type"] == "validation"
        assert call(a, sa, "read", {"path": "missing.txt"})["is_error"] is True
        assert call(b, sb, "bash", {"command": "true"})["is_error"] is False
        assert bad.get("/v1/sessions").status_code == 401
        assert a.get("/v1/sessions/snosuch").status_code == 404
    m = scrape(server)
    assert value(m, "runner_tool_calls_total", tenant="obs-a", tool="bash") == 2
    assert value(m, "runner_tool_calls_total", tenant="obs-b", tool="bash") == 1
    assert value(m, "runner_tool_errors_total", tenant="obs-a", tool="nosuch", error_type="validation") == 1
    assert value(m, "runner_tool_errors_total", tenant="obs-a", tool="read") == 1
    assert value(m, "runner_tool_errors_total", tenant="obs-a", tool="bash") == 0
    assert value(m, "runner_tool_call_duration_seconds_count", tenant="obs-a", tool="bash") == 2
    assert value(m, "runner_tool_call_duration_seconds_bucket", tenant="obs-b", tool="bash", le="+Inf") == 1
    assert value(m, "runner_queue_wait_seconds_count", tenant="obs-a") == 4
    assert value(m, "runner_sandboxes_started_total", tenant="obs-a") >= 1
    assert value(m, "runner_sessions", tenant="obs-a", state="open") == 1
    assert value(m, "runner_sessions_live", tenant="obs-b") == 1
    # responses by route template (never the raw path: a session id is no label) and status
    assert value(m, "runner_http_responses_total", route="/v1/sessions", method="POST", status="201") == 2
    assert value(m, "runner_http_responses_total", route="/v1/sessions/{sid}/calls", method="POST",
                 status="200") == 5
    assert value(m, "runner_http_responses_total", route="/v1/sessions", method="GET", status="401") == 1
    assert value(m, "runner_http_responses_total", route="/v1/sessions/{sid}", method="GET", status="404") == 1
    assert not any("snosuch" in json.dumps(s.labels) or sa in json.dumps(s.labels)
                   for v in m.values() for s in v)
    assert value(m, "runner_http_request_duration_seconds_count", route="/v1/sessions", method="POST") == 2


def test_metrics_are_read_from_loopback_or_with_the_operator_token(start_server, data, policy_file):
    key = add_tenant("obs-a", data, policy_file)
    server = start_server("--data", str(data))
    token = (data / "operator-token").read_text().strip()
    assert len(token) == 64 and (data / "operator-token").stat().st_mode & 0o777 == 0o600
    url = server.url + "/metrics"
    assert httpx.get(url).status_code == 200  # loopback, no key
    proxied = {"X-Forwarded-For": "203.0.113.7"}  # a reverse proxy on this machine: not loopback's
    r = httpx.get(url, headers=proxied)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer" and "operator" in r.json()["detail"]
    assert httpx.get(url, headers={"Forwarded": "for=203.0.113.7"}).status_code == 401
    assert httpx.get(url, headers={**proxied, "Authorization": f"Bearer {key}"}).status_code == 401  # a tenant's key
    assert httpx.get(url, headers={**proxied, "Authorization": "Bearer " + "0" * 64}).status_code == 401
    assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}).status_code == 401  # a wrong key, even here
    ok = httpx.get(url, headers={**proxied, "Authorization": f"Bearer {token}"})
    assert ok.status_code == 200 and "runner_tool_calls_total" in ok.text


def test_operator_token_from_the_environment(start_server, data, policy_file):
    server = start_server("--data", str(data), env={"RUNNER_OPERATOR_TOKEN": "s3cret-operator-token"})
    proxied = {"X-Forwarded-For": "203.0.113.7"}
    assert httpx.get(server.url + "/metrics", headers={**proxied, "Authorization": "Bearer s3cret-operator-token"}
                     ).status_code == 200
    assert not (data / "operator-token").exists()  # the variable is the token: no file made beside it


def _records(lines: list[str]) -> list[dict]:
    out = []
    for line in lines:
        if line.strip():
            rec = json.loads(line)  # every line of the log is one JSON object
            assert {"ts", "level", "event", "msg"} <= rec.keys(), rec
            out.append(rec)
    return out


def test_the_log_is_json_lines_a_request_each_with_lifecycle_events(start_server, data, policy_file, tmp_path):
    key = add_tenant("obs-a", data, policy_file)
    server = start_server("--data", str(data), "--audit", str(tmp_path / "elsewhere.jsonl"))
    with server.client(key) as c, server.client("rk_nosuch_key") as bad:
        sid = new_session(c)
        call(c, sid, "bash", {"command": "true"})
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204
        assert bad.post("/v1/sessions", json={}).status_code == 401
    assert server.stop() == 0
    recs = _records(server.stderr)
    reqs = [r for r in recs if r["event"] == "request"]
    made = next(r for r in reqs if r["route"] == "/v1/sessions" and r["status"] == 201)
    assert made["tenant"] == "obs-a" and made["method"] == "POST" and made["duration_ms"] >= 0
    called = next(r for r in reqs if r["route"] == "/v1/sessions/{sid}/calls")
    assert called["status"] == 200 and called["tenant"] == "obs-a"
    refused = next(r for r in reqs if r["status"] == 401)
    assert refused["route"] == "/v1/sessions" and "tenant" not in refused
    events = [r["event"] for r in recs]
    for e in ("listening", "session_created", "session_closed", "stopping", "stopped"):
        assert e in events, (e, events)
    closed = next(r for r in recs if r["event"] == "session_closed")
    assert closed["session"] == sid and closed["reason"] == "deleted" and closed["tenant"] == "obs-a"
    # --audit: the records went there, with the tenant
    audit = [json.loads(x) for x in (tmp_path / "elsewhere.jsonl").read_text().splitlines()]
    assert [r["tool"] for r in audit] == ["bash"] and audit[0]["tenant"] == "obs-a"
    assert not (data / "audit.jsonl").exists()

    quiet = start_server("--data", str(data), "--log-level", "warning")
    with quiet.client(key) as c:
        assert c.get("/v1/sessions").status_code == 200
    assert quiet.stop() == 0
    assert [r["event"] for r in _records(quiet.stderr) if r["level"] == "info"] == ["listening"]  # said always
    assert not [r for r in _records(quiet.stderr) if r["event"] == "request"]


def test_ready_checks_the_engine_the_database_and_the_images(start_server, data, policy_file):
    add_tenant("obs-a", data, policy_file)
    server = start_server("--data", str(data))
    r = httpx.get(server.url + "/v1/ready")
    assert r.status_code == 200, r.text
    checks = r.json()["checks"]
    assert checks["engine"]["ok"] and checks["database"]["ok"] and checks["images"] == {"ok": True, "wanted": 1,
                                                                                       "missing": []}
    # an image granted for /v1/exec that the engine does not have (removed since the grant)
    with sqlite3.connect(data / "runner.db") as db:
        db.execute("update tenants set images = ? where name = 'obs-a'", (json.dumps(["runner-test/obs-gone:1"]),))
    r = httpx.get(server.url + "/v1/ready")
    assert r.status_code == 503 and r.json()["status"] == "not ready"
    assert r.json()["checks"]["images"]["missing"] == ["runner-test/obs-gone:1"]
    # past a proxy, not the operator: how many, not which
    r = httpx.get(server.url + "/v1/ready", headers={"X-Forwarded-For": "203.0.113.7"})
    assert r.status_code == 503 and r.json()["checks"]["images"]["missing"] == 1
    assert httpx.get(server.url + "/v1/health").status_code == 200  # alive all the same


def test_ready_says_when_the_engine_does_not_answer(start_server, data, policy_file):
    server = start_server("--data", str(data), env={"DOCKER_HOST": "unix:///nonexistent/obs-engine.sock"})
    r = httpx.get(server.url + "/v1/ready")
    assert r.status_code == 503
    assert r.json()["checks"]["engine"]["ok"] is False and r.json()["checks"]["database"]["ok"] is True
    assert httpx.get(server.url + "/v1/health").status_code == 200


def test_the_servers_audit_log_is_under_its_data_with_the_tenant_and_tail_filters_and_follows(
        start_server, data, policy_file, tmp_path):
    ka, kb = add_tenant("obs-a", data, policy_file), add_tenant("obs-b", data, policy_file)
    state = tmp_path / "state"
    server = start_server("--data", str(data), env={"XDG_STATE_HOME": str(state)})
    with server.client(ka) as a, server.client(kb) as b:
        sa, sb = new_session(a), new_session(b)
        call(a, sa, "bash", {"command": "true"})
        call(a, sa, "ls", {"path": "."})
        call(b, sb, "bash", {"command": "true"})
        recs = [json.loads(x) for x in (data / "audit.jsonl").read_text().splitlines()]
        assert [(r["tenant"], r["session"], r["tool"]) for r in recs] == [
            ("obs-a", sa, "bash"), ("obs-a", sa, "ls"), ("obs-b", sb, "bash")]
        assert not (state / "runner" / "audit.jsonl").exists()  # not the user-wide log

        def tail(*args: str) -> list[dict]:
            p = subprocess.run(runner_argv("audit", "tail", "--data", str(data), "--json", *args),
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr
            return [json.loads(x) for x in p.stdout.splitlines()]
        assert [r["tool"] for r in tail("--tenant", "obs-a")] == ["bash", "ls"]
        assert [r["tenant"] for r in tail("--tool", "bash")] == ["obs-a", "obs-b"]
        assert [r["tenant"] for r in tail("--session", sb)] == ["obs-b"]
        assert [r["tool"] for r in tail("--tenant", "obs-a", "-n", "1")] == ["ls"]
        assert tail("--tenant", "nobody") == []

        # -f: the last record of obs-a, then each new one of obs-a as it comes, none of obs-b's
        follower = subprocess.Popen(runner_argv("audit", "tail", "-f", "-n", "1", "--data", str(data), "--json",
                                                "--tenant", "obs-a"), stdout=subprocess.PIPE, text=True)
        got: list[dict] = []
        threading.Thread(target=lambda: got.extend(json.loads(x) for x in follower.stdout), daemon=True).start()
        try:
            wait_for(lambda: len(got) == 1, 30, "the last record")
            assert got[0]["tool"] == "ls"
            call(b, sb, "bash", {"command": "true"})
            call(a, sa, "glob", {"pattern": "*"})
            wait_for(lambda: len(got) == 2, 30, "the new record")
            call(a, sa, "bash", {"command": "echo again"})
            wait_for(lambda: len(got) == 3, 30, "another")
            assert [(r["tenant"], r["tool"]) for r in got] == [("obs-a", "ls"), ("obs-a", "glob"), ("obs-a", "bash")]
        finally:
            follower.terminate()
            follower.wait(30)


DASHBOARD = ROOT / "examples" / "grafana-dashboard.json"


def _queried(dashboard: dict) -> set[str]:
    names: set[str] = set()

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "expr" and isinstance(v, str):
                    names.update(re.findall(r"\brunner_[a-z_]+\b", v))
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)
    walk(dashboard)
    return names


def test_the_grafana_dashboard_queries_only_metrics_the_server_exposes(start_server, data, policy_file):
    dashboard = json.loads(DASHBOARD.read_text())
    queried = _queried(dashboard)
    assert len(queried) >= 10, queried
    key = add_tenant("obs-a", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = new_session(c)
        call(c, sid, "bash", {"command": "true"})
    r = httpx.get(server.url + "/metrics")
    exposed = set()
    for fam in text_string_to_metric_families(r.text):
        exposed.add(fam.name)  # a family with no sample yet (no egress refused) still has its names
        exposed.update({"counter": [fam.name + "_total"], "histogram": [fam.name + x for x in ("_bucket", "_count",
                                                                                              "_sum")]}.get(fam.type, []))
        exposed.update(s.name for s in fam.samples)
    assert queried <= exposed, f"the dashboard queries metrics /metrics does not have: {sorted(queried - exposed)}"

