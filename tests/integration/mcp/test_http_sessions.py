"""`runner mcp --http`'s session ids (issue 43's classes, on the server without tenants): a
request carrying its session id twice is refused, whichever copy a reader would take; an id
the server did not mint is 404 and never becomes a session with a sandbox of its own."""
from __future__ import annotations

import json
from contextlib import AsyncExitStack

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .conftest import containers_of, raw_request, wait_for
from .test_http import text

pytestmark = pytest.mark.usefixtures("no_leaks")

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
           "MCP-Protocol-Version": "2025-06-18"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}


def bash(command: str) -> dict:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash",
                                                                          "arguments": {"command": command}}}


def opened(c: httpx.Client, url: str) -> str:
    r = c.post(url, json=INIT, headers=HEADERS)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers={**HEADERS,
                                                                                       "mcp-session-id": sid})
    return sid


def test_a_session_id_sent_twice_is_refused(start_http):
    server = start_http()
    with httpx.Client(timeout=120) as c:
        first, second = opened(c, server.url), opened(c, server.url)
        twice = [*HEADERS.items(), ("Mcp-Session-Id", first), ("Mcp-Session-Id", second)]
        status, _, body = raw_request(server.url, "POST", twice, json.dumps(bash("echo ran")).encode())
        assert status == 400 and b"mcp-session-id header appears more than once" in body, (status, body)
        status, _, body = raw_request(server.url, "DELETE", twice)
        assert status == 400, (status, body)
        for sid in (first, second):  # both sessions as they were, each with its one header
            r = c.post(server.url, json=bash("echo still"), headers={**HEADERS, "mcp-session-id": sid})
            assert r.status_code == 200 and "still" in r.text, r.text
            assert c.delete(server.url, headers={**HEADERS, "mcp-session-id": sid}).status_code == 200


def test_a_session_id_the_server_did_not_mint_is_404_and_keeps_no_sandbox(start_http, docker_client):
    """A 2026 single-exchange request carrying an id the client chose used to open a session under
    it, with a sandbox kept for whoever named the id next."""
    server = start_http()

    async def main():
        try:
            async with AsyncExitStack() as stack:
                http = await stack.enter_async_context(httpx2.AsyncClient(
                    headers={"Mcp-Session-Id": "chosen-by-the-client"}, timeout=120))
                read, write = await stack.enter_async_context(streamable_http_client(server.url, http_client=http))
                s = await stack.enter_async_context(ClientSession(read, write))
                await s.discover()
                return "result: " + text(await s.call_tool("bash", {"command": "echo kept > f; cat f"}))
        except Exception as e:
            return f"refused: {e!r}"

    seen = anyio.run(main)
    assert seen.startswith("refused:") and "kept" not in seen, seen
    with httpx.Client(timeout=120) as c:
        r = c.post(server.url, json=bash("cat f"), headers={**HEADERS, "mcp-session-id": "chosen-by-the-client"})
        assert r.status_code == 404 and "kept" not in r.text, r.text
    wait_for(lambda: not containers_of(docker_client, server.pid), 60, "no sandbox kept for the chosen id")
