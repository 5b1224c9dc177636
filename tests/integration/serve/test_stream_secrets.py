"""Granted secrets never leave the server while a call streams (issue 43, hole 5): the SSE
`output` events of `calls?stream=true` and the progress notifications of serve's `/mcp` are
redacted as the final result is, a secret printed in two pieces (two chunks) included. The real
server on a loopback port, real clients (httpx for SSE, the MCP SDK's client for progress)."""
from __future__ import annotations

import json
from contextlib import AsyncExitStack

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .conftest import add_tenant

pytestmark = pytest.mark.usefixtures("no_leaks")

SECRET = "tok-7f3a9c21e8b64d05a1c9"
# the whole secret in one line, then its two halves printed apart (two chunks of output)
COMMAND = ('echo "one: $STREAM_TOKEN"; sleep 0.3; printf "two: %s" "${STREAM_TOKEN:0:11}"; sleep 0.5; '
           'printf "%s\\n" "${STREAM_TOKEN:11}"; sleep 0.3; echo done')
POLICY = """\
extends: default
name: secretive
sandbox: {lifecycle: per-session, pool_size: 0}
limits: {memory: 256m, pids: 128, timeout: 60}
secrets:
  STREAM_TOKEN: {from_env: RUNNER_TEST_STREAM_TOKEN}
"""


@pytest.fixture
def secretive(start_server, data, tmp_path):
    policy = tmp_path / "secretive.yaml"
    policy.write_text(POLICY)
    key = add_tenant("sec", data, policy)
    server = start_server("--data", str(data), env={"RUNNER_TEST_STREAM_TOKEN": SECRET})
    server.key = key
    return server


def check(streamed: str, final: str) -> None:
    assert "[REDACTED:secret]" in final and SECRET not in final, final
    assert SECRET not in streamed and SECRET[:11] + SECRET[11:] not in streamed.replace("\n", ""), streamed
    assert streamed.count("[REDACTED:secret]") >= 2 and streamed.endswith("done\n"), streamed


def test_sse_output_events_are_redacted_a_split_secret_included(secretive):
    with secretive.client(secretive.key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        events = []
        with c.stream("POST", f"/v1/sessions/{sid}/calls", params={"stream": "true"},
                      json={"tool": "bash", "args": {"command": COMMAND}}) as r:
            name = None
            for line in r.iter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    events.append((name, json.loads(line[6:])))
        c.delete(f"/v1/sessions/{sid}")
    outputs = [d["text"] for n, d in events if n == "output"]
    assert events[-1][0] == "result" and len(outputs) >= 2, events
    check("".join(outputs), events[-1][1]["content"])


def test_mcp_progress_notifications_are_redacted_a_split_secret_included(secretive):
    async def main():
        seen = []
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {secretive.key}"}, timeout=120))
            read, write, *_ = await stack.enter_async_context(
                streamable_http_client(secretive.url + "/mcp", http_client=http))
            s = await stack.enter_async_context(ClientSession(read, write))
            await s.initialize()

            async def progress(done, total, message):
                seen.append(message or "")

            res = await s.call_tool("bash", {"command": COMMAND}, progress_callback=progress)
        return seen, "\n".join(b.text for b in res.content if isinstance(b, types.TextContent))

    seen, final = anyio.run(main)
    assert len(seen) >= 2, seen
    check("".join(seen), final)
