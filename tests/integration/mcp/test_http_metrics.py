"""`runner mcp --http`'s GET /metrics (issue 50): the tool calls, sessions and responses of the
MCP server, in Prometheus' text format, read from loopback (not through a proxy that says so)."""
from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .test_http_sessions import HEADERS, bash, opened

pytestmark = pytest.mark.usefixtures("no_leaks")


def samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def test_metrics_of_the_mcp_server(start_http):
    server = start_http()
    base = server.url.rsplit("/mcp", 1)[0]
    with httpx.Client(timeout=120) as c:
        sid = opened(c, server.url)
        r = c.post(server.url, json=bash("echo counted"), headers={**HEADERS, "mcp-session-id": sid})
        assert r.status_code == 200 and "counted" in r.text
        m = c.get(base + "/metrics")
        assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain; version=0.0.4")
        got = samples(m.text)
        assert sum(s.value for s in got["runner_tool_calls_total"] if s.labels["tool"] == "bash") == 1
        assert sum(s.value for s in got["runner_tool_call_duration_seconds_count"]) == 1
        assert [s.value for s in got["runner_sessions_live"]] == [1]
        assert sum(s.value for s in got["runner_http_responses_total"]
                   if s.labels["route"] == "/mcp" and s.labels["status"] == "200") >= 2
        assert sum(s.value for s in got["runner_sandboxes_started_total"]) >= 1
        # through a proxy on this machine, with no operator token set: refused
        assert c.get(base + "/metrics", headers={"X-Forwarded-For": "203.0.113.7"}).status_code == 401
