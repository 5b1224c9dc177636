"""MCP over streamable HTTP at /mcp with the tenants' keys, driven by the SDK's own client: one
sandbox per MCP session, labelled with its tenant; no key is 401; another tenant's MCP session is
404; the session's sandbox and workspace go when it ends."""
from __future__ import annotations

from contextlib import AsyncExitStack

import anyio
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .conftest import add_tenant, fresh_minute, tenant_containers, tenants, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


def text(res) -> str:
    return "\n".join(b.text for b in res.content if isinstance(b, types.TextContent))


def test_mcp_sessions_with_keys_one_sandbox_each(start_server, data, policy_file, docker_client):
    keys = {t: add_tenant(t, data, policy_file, "--calls-per-minute", "4") for t in ("m1", "m2")}
    server = start_server("--data", str(data))
    url = server.url + "/mcp"
    seen = {}

    async def main():
        async with AsyncExitStack() as stack:
            async def remember(response):
                seen.setdefault("sid", response.headers.get("mcp-session-id"))
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {keys['m1']}"}, timeout=120, event_hooks={"response": [remember]}))
            read, write, *_ = await stack.enter_async_context(streamable_http_client(url, http_client=http))
            s = await stack.enter_async_context(ClientSession(read, write))
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            assert {"bash", "read"} <= names
            res = await s.call_tool("bash", {"command": "echo hello > f.txt; cat f.txt; id -u"})
            assert not res.is_error and text(res).split() == ["hello", "1000"], text(res)
            sid = seen["sid"]
            assert sid
            seen["containers"] = [c["Labels"].get("runner.tenant") for c in tenant_containers(docker_client, "m1")]
            # another tenant's key on this session id: 404, and the session is untouched
            async with httpx.AsyncClient(timeout=60) as other:
                body = {"jsonrpc": "2.0", "id": 9, "method": "tools/list"}
                for k in (keys["m2"], None):
                    h = {"mcp-session-id": sid, "Accept": "application/json, text/event-stream",
                         "Content-Type": "application/json"}
                    if k:
                        h["Authorization"] = f"Bearer {k}"
                    r = await other.post(url, json=body, headers=h)
                    seen.setdefault("codes", []).append(r.status_code)
            res = await s.call_tool("read", {"path": "f.txt"})
            assert "hello" in text(res)
            # the tenant's calls per minute count MCP calls too: five in one minute, four allowed
            fresh_minute()
            results = [await s.call_tool("ls", {}) for _ in range(5)]
            assert any(r.is_error and "calls per minute" in text(r) for r in results)
    anyio.run(main)
    assert seen["codes"] == [404, 401]
    assert seen["containers"] == ["m1"]
    # the client's exit ended the session (DELETE): its sandbox goes
    wait_for(lambda: not tenant_containers(docker_client, "m1"), 60, "the MCP session's sandbox removed")
    wait_for(lambda: not any((data / "mcp" / "m1").iterdir()), 60, "the MCP session's workspace removed")


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}


def mcp_headers(key: str, sid: str | None = None) -> dict:
    h = {"Authorization": f"Bearer {key}", "Accept": "application/json, text/event-stream",
         "Content-Type": "application/json", "MCP-Protocol-Version": "2025-06-18"}
    return {**h, "mcp-session-id": sid} if sid else h


def test_an_mcp_session_takes_its_place_among_the_tenants_sessions_when_opened(start_server, data, policy_file,
                                                                                 docker_client):
    """One session allowed: an open /v1 session leaves no room to open an MCP one (429 at
    initialize), and an MCP session, called or not, none for a second one or a /v1 one; ending
    either makes room."""
    key = add_tenant("one", data, policy_file, "--max-sessions", "1")
    server = start_server("--data", str(data))
    url = server.url + "/mcp"
    seen = {}

    async def main():
        with server.client(key) as c:
            sid = c.post("/v1/sessions", json={}).json()["id"]
            async with httpx.AsyncClient(timeout=60) as raw:
                refused = await raw.post(url, json=INIT, headers=mcp_headers(key))
                assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0, refused.text
                assert "has 1 open sessions (1 on /v1, 0 over MCP, 0 running /v1/exec" in refused.json()["detail"]
                assert c.delete(f"/v1/sessions/{sid}").status_code == 204
                async with AsyncExitStack() as stack:
                    http = await stack.enter_async_context(httpx2.AsyncClient(
                        headers={"Authorization": f"Bearer {key}"}, timeout=120))
                    read, write, *_ = await stack.enter_async_context(streamable_http_client(url, http_client=http))
                    s = await stack.enter_async_context(ClientSession(read, write))
                    await s.initialize()  # no call yet: the session holds its place all the same
                    seen["second_mcp"] = (await raw.post(url, json=INIT, headers=mcp_headers(key))).status_code
                    seen["v1_while_mcp"] = c.post("/v1/sessions", json={}).status_code
                    seen["admitted"] = await s.call_tool("bash", {"command": "echo yes"})
            # the client's exit ended the MCP session (DELETE; its sandbox goes, then its place):
            # room again on /v1, and 429 until then
            def room() -> bool:
                r = c.post("/v1/sessions", json={})
                if r.status_code == 201:
                    assert c.delete(f"/v1/sessions/{r.json()['id']}").status_code == 204
                    return True
                assert r.status_code == 429, r.text
                return False
            wait_for(room, 60, "room for a /v1 session once the MCP session ended")
    anyio.run(main)
    assert seen["second_mcp"] == 429 and seen["v1_while_mcp"] == 429
    assert not seen["admitted"].is_error and text(seen["admitted"]).strip() == "yes"
    assert not tenant_containers(docker_client, "one")


def test_removing_a_tenant_ends_its_mcp_sessions(start_server, data, policy_file, docker_client):
    key = add_tenant("leaving", data, policy_file)
    server = start_server("--data", str(data))
    with httpx.Client(timeout=60) as c:
        r = c.post(server.url + "/mcp", json=INIT, headers=mcp_headers(key))
        assert r.status_code == 200, r.text
        sid = r.headers["mcp-session-id"]
        c.post(server.url + "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
               headers=mcp_headers(key, sid))
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bash", "arguments": {
            "command": "echo here"}}}
        r = c.post(server.url + "/mcp", json=call, headers=mcp_headers(key, sid))
        assert r.status_code == 200 and "here" in r.text, r.text
    assert tenant_containers(docker_client, "leaving")
    tenants("remove", "leaving", data=data)
    wait_for(lambda: not tenant_containers(docker_client, "leaving"), 60, "the removed tenant's MCP sandbox removed")
    wait_for(lambda: not any((data / "mcp" / "leaving").iterdir()), 60, "its MCP workspace removed")
