"""Tenants of `runner serve` against each other on /mcp (issue 43): a duplicated header that
names the tenant or the session is refused before anything reads it; a session id the server did
not mint is nobody's session, for every tenant; a tenant's cap on calls at once holds on /mcp as
on /v1, one count across both. The real server process on a loopback port, the SDK's own client,
raw HTTP where a header has to come twice."""
from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from ..mcp.conftest import raw_request
from .conftest import add_tenant, tenant_containers, wait_for
from .test_mcp import INIT, mcp_headers, text

pytestmark = pytest.mark.usefixtures("no_leaks")

MODERN = "2026-07-28"  # the single-exchange protocol: no initialize, no session of its own


def open_legacy(c: httpx.Client, url: str, key: str) -> str:
    """An MCP session opened the 2025 way (initialize, initialized): its id, as the server minted it."""
    r = c.post(url, json=INIT, headers=mcp_headers(key))
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    c.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=mcp_headers(key, sid))
    return sid


def bash(command: str, rid: int = 2) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": "bash",
                                                                            "arguments": {"command": command}}}


def test_a_duplicated_session_id_or_key_is_refused_before_it_reaches_anyones_session(start_server, data, policy_file):
    """The attack of issue 43: the victim's session id first, the attacker's own last. It used to
    pass the owner check (which read the last copy) and run in the victim's sandbox (the SDK and the
    registry read the first); a DELETE sent so ended the victim's session."""
    victim, attacker = (add_tenant(t, data, policy_file) for t in ("victim", "attacker"))
    server = start_server("--data", str(data))
    url = server.url + "/mcp"
    with httpx.Client(timeout=120) as c:
        sv = open_legacy(c, url, victim)
        r = c.post(url, json=bash("echo victim-secret > mine.txt"), headers=mcp_headers(victim, sv))
        assert r.status_code == 200 and '"isError":false' in r.text.replace(" ", ""), r.text
        sa = open_legacy(c, url, attacker)
        base = [(k, v) for k, v in mcp_headers(attacker).items()]
        status, _, body = raw_request(url, "POST", [*base, ("Mcp-Session-Id", sv), ("Mcp-Session-Id", sa)],
                                      json.dumps(bash("cat mine.txt; echo attacker > planted.txt")).encode())
        assert status == 400 and b"mcp-session-id header appears more than once" in body, (status, body)
        assert b"victim-secret" not in body
        status, _, body = raw_request(url, "DELETE", [*base, ("Mcp-Session-Id", sv), ("Mcp-Session-Id", sa)])
        assert status == 400, (status, body)
        # two keys, on either route: refused, whichever copy a reader would take
        two_keys = [("Authorization", f"Bearer {attacker}"), ("Authorization", f"Bearer {victim}")]
        status, _, body = raw_request(server.url + "/v1/sessions", "GET", two_keys)
        assert status == 400 and b"authorization header appears more than once" in body, (status, body)
        status, _, body = raw_request(url, "POST", [*two_keys, *[(k, v) for k, v in base if k != "Authorization"],
                                                    ("Mcp-Session-Id", sv)], json.dumps(bash("ls")).encode())
        assert status == 400 and b"authorization header appears more than once" in body, (status, body)
        # the victim's session is its own still: alive, its file there, nothing planted
        r = c.post(url, json=bash("cat mine.txt; ls", 3), headers=mcp_headers(victim, sv))
        assert r.status_code == 200 and "victim-secret" in r.text and "planted" not in r.text, r.text
        # the attacker's own session answers to it with one header, as ever
        r = c.post(url, json=bash("ls mine.txt", 4), headers=mcp_headers(attacker, sa))
        assert r.status_code == 200 and "No such file" in r.text, r.text
        for key, sid in ((victim, sv), (attacker, sa)):
            assert c.delete(url, headers=mcp_headers(key, sid)).status_code == 200


async def _modern_call(url: str, key: str, sid: str, command: str) -> str:
    """A call over the 2026 single-exchange protocol by the SDK's own client, its HTTP client
    sending an Mcp-Session-Id the caller chose: the tool's text, or the error that stopped it."""
    try:
        async with AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {key}", "Mcp-Session-Id": sid}, timeout=120))
            read, write = await stack.enter_async_context(streamable_http_client(url, http_client=http))
            s = await stack.enter_async_context(ClientSession(read, write))
            await s.discover()
            res = await s.call_tool("bash", {"command": command})
            return "result: " + text(res)
    except Exception as e:
        return f"refused: {e!r}"


def test_a_session_id_the_server_did_not_mint_is_nobodys_session(start_server, data, policy_file, docker_client):
    """Session fixation (issue 43): a 2026 request carrying an id the client chose became a
    persistent session under that id, owned by no tenant, which any tenant naming it then ran in.
    Every such id is 404 now, on both protocols, and so is another tenant's minted id."""
    one, two = (add_tenant(t, data, policy_file) for t in ("fix1", "fix2"))
    server = start_server("--data", str(data))
    url = server.url + "/mcp"
    chosen = "fixated-by-a-client"
    first = anyio.run(_modern_call, url, one, chosen, "echo fix1-secret > f; cat f")
    second = anyio.run(_modern_call, url, two, chosen, "cat f; echo fix2 was here")
    assert "fix1-secret" not in second and "fix2 was here" not in second, second
    for seen in (first, second):
        assert seen.startswith("refused:") and ("404" in seen or "Session not found" in seen), seen
    with httpx.Client(timeout=120) as c:
        # the 2025 protocol with an id never minted: 404 (the SDK's answer to an unknown session)
        r = c.post(url, json=bash("echo no"), headers=mcp_headers(one, chosen))
        assert r.status_code == 404, r.text
        # another tenant's minted id, on either protocol: 404
        sid = open_legacy(c, url, one)
        for version in ("2025-06-18", MODERN):
            r = c.post(url, json=bash("echo in fix1's session"), headers={
                **mcp_headers(two, sid), "MCP-Protocol-Version": version})
            assert r.status_code == 404 and "in fix1" not in r.text, (version, r.text)
        # nor may it end the session or listen on its stream
        assert c.delete(url, headers=mcp_headers(two, sid)).status_code == 404
        with c.stream("GET", url, headers={**mcp_headers(two, sid), "Accept": "text/event-stream"}) as r:
            assert r.status_code == 404
        # the owner's session is its own still
        r = c.post(url, json=bash("echo mine"), headers=mcp_headers(one, sid))
        assert r.status_code == 200 and "mine" in r.text, r.text
        assert c.delete(url, headers=mcp_headers(one, sid)).status_code == 200
    # nothing of the refused requests stays behind: no sandbox, no workspace
    wait_for(lambda: not tenant_containers(docker_client, "fix1") and not tenant_containers(docker_client, "fix2"),
             60, "no sandbox of either tenant left")
    for t in ("fix1", "fix2"):
        d = data / "mcp" / t
        wait_for(lambda d=d: not d.exists() or not any(d.iterdir()), 60, f"no MCP workspace of {t} left")


BLOCK = "touch started; while [ ! -e go ]; do sleep 0.1; done; echo done"


def _started(root: Path) -> list[Path]:
    """The workspaces under root whose blocked call has started: /v1's are root/SID, an MCP
    session's root/m<server pid>.<start>-<random>/ws."""
    return [p.parent for pattern in ("*/started", "*/ws/started") for p in root.glob(pattern)] if root.exists() else []


def test_max_calls_per_tenant_holds_on_mcp_and_v1_together(start_server, data, policy_file, docker_client):
    """--max-calls-per-tenant 2, one call running on /mcp and one on /v1: a third call is refused
    on either route (it used to run on /mcp: MCP calls took no place and ran on their own large
    limiter); once they end, calls run again."""
    key = add_tenant("busy", data, policy_file)
    server = start_server("--data", str(data), "--max-calls-per-tenant", "2")
    url = server.url + "/mcp"
    seen: dict = {}

    async def main():
        async with AsyncExitStack() as stack:
            sessions = []
            for _ in range(2):
                http = await stack.enter_async_context(httpx2.AsyncClient(
                    headers={"Authorization": f"Bearer {key}"}, timeout=120))
                read, write, *_ = await stack.enter_async_context(streamable_http_client(url, http_client=http))
                s = await stack.enter_async_context(ClientSession(read, write))
                await s.initialize()
                sessions.append(s)
            v1 = await stack.enter_async_context(httpx.AsyncClient(
                base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120))
            held, spare = [(await v1.post("/v1/sessions", json={})).json()["id"] for _ in range(2)]

            async def mcp_blocked():
                seen["mcp_blocked"] = await sessions[0].call_tool("bash", {"command": BLOCK})

            async def v1_blocked():
                seen["v1_blocked"] = (await v1.post(f"/v1/sessions/{held}/calls", json={
                    "tool": "bash", "args": {"command": BLOCK}})).json()

            async with anyio.create_task_group() as tg:
                tg.start_soon(mcp_blocked)
                tg.start_soon(v1_blocked)
                mcp_ws, v1_ws = data / "mcp" / "busy", data / "workspaces" / "busy"
                with anyio.fail_after(120):  # both calls running (a wait for them, bounded so a miss fails)
                    while not (_started(mcp_ws) and _started(v1_ws)):
                        await anyio.sleep(0.1)
                seen["mcp_third"] = await sessions[1].call_tool("bash", {"command": "echo third"})
                seen["v1_third"] = await v1.post(f"/v1/sessions/{spare}/calls", json={
                    "tool": "bash", "args": {"command": "echo third"}})
                for ws in _started(mcp_ws) + _started(v1_ws):
                    (ws / "go").touch()
            seen["mcp_after"] = await sessions[1].call_tool("bash", {"command": "echo after"})
            seen["v1_after"] = await v1.post(f"/v1/sessions/{spare}/calls", json={
                "tool": "bash", "args": {"command": "echo after"}})
            for sid in (held, spare):
                await v1.delete(f"/v1/sessions/{sid}")
    anyio.run(main)
    assert seen["mcp_third"].is_error and "has 2 calls in flight" in text(seen["mcp_third"]), text(seen["mcp_third"])
    assert seen["mcp_third"].meta["runner/meta"]["retry_after"] == 1
    assert seen["v1_third"].status_code == 429 and "has 2 calls in flight" in seen["v1_third"].text
    assert seen["v1_third"].headers["retry-after"] == "1"
    assert text(seen["mcp_blocked"]).strip() == "done" and seen["v1_blocked"]["content"].strip() == "done"
    assert text(seen["mcp_after"]).strip() == "after", text(seen["mcp_after"])
    assert seen["v1_after"].status_code == 200 and seen["v1_after"].json()["content"].strip() == "after"
    try:
        wait_for(lambda: not tenant_containers(docker_client, "busy"), 60, "the tenant's sandboxes removed")
    except AssertionError:
        left = [(c["Labels"].get("runner.session"), c["Labels"].get("runner.role"), c["State"])
                for c in tenant_containers(docker_client, "busy")]
        raise AssertionError(f"the tenant's sandboxes were not removed: {left}; the server said:\n"
                             + "".join(server.stderr)) from None
