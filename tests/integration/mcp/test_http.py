"""`runner mcp --http`: streamable HTTP on a free loopback port, driven by the SDK's own client."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from .conftest import containers_of, runner_argv, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


def text(res: types.CallToolResult) -> str:
    return "\n".join(b.text for b in res.content if isinstance(b, types.TextContent))


async def open_session(stack, url: str, terminate_on_close: bool = True) -> ClientSession:
    read, write = await stack.enter_async_context(streamable_http_client(url, terminate_on_close=terminate_on_close))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


def run_session(url, fn, terminate_on_close=True):
    from contextlib import AsyncExitStack

    async def main():
        async with AsyncExitStack() as stack:
            return await fn(await open_session(stack, url, terminate_on_close))

    return anyio.run(main)


def test_tools_calls_errors_and_progress_over_http(start_http, env, workspace, policy, docker_client):
    server = start_http()

    async def go(session):
        seen = []

        async def progress(done, total, message):
            seen.append(message)

        return {
            "tools": await session.list_tools(),
            "write": await session.call_tool("write", {"path": "h.txt", "content": "over http\n"}),
            "read": await session.call_tool("read", {"path": "h.txt"}),
            "custom": await session.call_tool("wordcount", {"args": "h.txt"}),
            "bash": await session.call_tool("bash", {"command": "for i in 1 2 3; do echo $i; sleep 0.2; done"},
                                            progress_callback=progress),
            "gated": await session.call_tool("ls", {}),
            "invalid": await session.call_tool("write", {"path": "x"}),
            "seen": seen,
            "containers": containers_of(docker_client, server.pid),
        }

    out = run_session(server.url, go)
    expected = json.loads(subprocess.run(runner_argv("tools", "--format", "mcp", "--workspace", str(workspace),
                                                     "--policy", str(policy)),
                                         env=env, capture_output=True, check=True).stdout)
    assert [t.model_dump(by_alias=True, exclude_none=True) for t in out["tools"].tools] == expected
    assert len(out["containers"]) == 1  # the session's sandbox
    assert not out["write"].is_error and text(out["read"]) == "     1\tover http"
    assert text(out["custom"]).split() == ["1", "2", "10", "h.txt"]
    assert text(out["bash"]) == "1\n2\n3\n" and "".join(out["seen"]) == "1\n2\n3\n"
    assert out["gated"].is_error and "denied by the policy" in text(out["gated"])
    assert out["invalid"].is_error and "content" in text(out["invalid"])
    # The client ended its session with DELETE: its sandbox is gone while the server runs on.
    wait_for(lambda: not containers_of(docker_client, server.pid), what="the DELETEd session's sandbox is removed")
    assert server.proc.poll() is None


def test_two_sessions_run_side_by_side_and_cannot_see_each_other(start_http, workspace):
    """Session A waits (in its sandbox) for a file that session B writes: were calls of different
    sessions serialized, A would wait out its timeout. A's /tmp file stays invisible to B."""
    server = start_http()
    from contextlib import AsyncExitStack

    async def main():
        async with AsyncExitStack() as stack:
            a = await open_session(stack, server.url)
            b = await open_session(stack, server.url)
            out = {}
            await a.call_tool("bash", {"command": "echo a-secret > /tmp/only-in-a"})

            async def a_waits():
                out["a"] = await a.call_tool("bash", {"command": "until [ -f go ]; do sleep 0.1; done; "
                                                                 "cat /tmp/only-in-a", "timeout": 120})

            async with anyio.create_task_group() as tg:
                tg.start_soon(a_waits)
                out["b_tmp"] = await b.call_tool("bash", {"command": "ls /tmp/only-in-a"})
                out["b_host"] = await b.call_tool("bash", {"command": "hostname"})
                out["b_write"] = await b.call_tool("write", {"path": "go", "content": "now\n"})
            out["a_host"] = await a.call_tool("bash", {"command": "hostname"})
            return out

    out = anyio.run(main)
    assert not out["a"].is_error and text(out["a"]) == "a-secret\n"
    assert out["b_tmp"].is_error and "No such file" in text(out["b_tmp"])
    assert text(out["b_host"]) != text(out["a_host"])  # two sandboxes
    assert (workspace / "go").read_text() == "now\n"


def test_an_idle_session_is_reaped(start_http, docker_client):
    server = start_http("--idle-timeout", "1")

    async def go(session):
        res = await session.call_tool("bash", {"command": "echo hi"})
        return res, containers_of(docker_client, server.pid)

    res, during = run_session(server.url, go, terminate_on_close=False)  # the client leaves without DELETE
    assert not res.is_error and text(res) == "hi\n" and len(during) == 1
    wait_for(lambda: not containers_of(docker_client, server.pid), what="the idle session's sandbox is removed")
    assert server.proc.poll() is None


def test_a_vanished_client_mid_call_leaves_no_container(start_http, env, docker_client):
    """SIGKILL a client during a long bash: its request is cancelled, the session goes idle, and
    the reaper removes the sandbox under the still-running command."""
    server = start_http("--idle-timeout", "1")
    client = subprocess.Popen([sys.executable, str(Path(__file__).with_name("hold_client.py")), "--url", server.url],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert client.stdout.readline().decode().strip() == "RUNNING", client.stderr.read().decode()[-3000:]
        assert containers_of(docker_client, server.pid)
        client.send_signal(signal.SIGKILL)
        wait_for(lambda: not containers_of(docker_client, server.pid), what="the sandbox is removed")
        assert server.proc.poll() is None
    finally:
        client.kill()
        client.wait()


def test_sigterm_during_a_call_removes_every_sandbox(start_http, env, docker_client):
    server = start_http()
    clients = [subprocess.Popen([sys.executable, str(Path(__file__).with_name("hold_client.py")), "--url", server.url],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    try:
        for c in clients:
            assert c.stdout.readline().decode().strip() == "RUNNING", c.stderr.read().decode()[-3000:]
        assert len(containers_of(docker_client, server.pid)) == 2
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(timeout=120)
        assert not containers_of(docker_client, server.pid)
    finally:
        for c in clients:
            c.kill()
            c.wait()


def test_sandboxes_past_max_sessions_are_refused(start_http):
    """One sandbox allowed: a second session is refused (503 from the SDK), and so is a request
    outside any session (the 2026 stateless protocol), which would otherwise get a sandbox of its own."""
    server = start_http("--max-sessions", "1")
    from contextlib import AsyncExitStack

    async def main():
        async with AsyncExitStack() as stack:
            a = await open_session(stack, server.url)
            first = await a.call_tool("bash", {"command": "echo one"})
            with pytest.raises(Exception) as second:
                async with AsyncExitStack() as other:
                    await open_session(other, server.url)
            async with AsyncExitStack() as other:
                read, write = await other.enter_async_context(streamable_http_client(server.url))
                stateless = await other.enter_async_context(ClientSession(read, write))
                await stateless.discover()
                refused = await stateless.call_tool("bash", {"command": "echo two"})
            return first, second.value, refused

    first, second, refused = anyio.run(main)
    assert text(first) == "one\n"
    assert "Too many open sessions" in repr(second)
    assert refused.is_error and "at most 1 sandboxes at once" in text(refused)


def test_a_request_outside_any_session_gets_a_sandbox_of_its_own(start_http, docker_client):
    server = start_http()
    from contextlib import AsyncExitStack

    async def main():
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(streamable_http_client(server.url))
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.discover()
            tools = await session.list_tools()
            one = await session.call_tool("bash", {"command": "echo x > /tmp/mine; hostname"})
            two = await session.call_tool("bash", {"command": "ls /tmp/mine"})
            return tools, one, two

    tools, one, two = anyio.run(main)
    assert "bash" in {t.name for t in tools.tools} and not one.is_error
    assert two.is_error  # a fresh sandbox per request: nothing of the first remains
    assert not containers_of(docker_client, server.pid)


@pytest.mark.parametrize("headers, status", [({"Host": "attacker.example:8765"}, 421),
                                             ({"Origin": "http://attacker.example"}, 403)])
def test_a_page_elsewhere_cannot_drive_the_loopback_server(start_http, docker_client, headers, status):
    """DNS rebinding or a cross-site page: a Host or Origin that is not loopback is refused before
    any session (or sandbox) exists."""
    import http.client
    from urllib.parse import urlsplit

    server = start_http()
    u = urlsplit(server.url)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "page", "version": "0"}}})
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("POST", u.path, body, headers={"Content-Type": "application/json",
                                                "Accept": "application/json, text/event-stream",
                                                "Host": f"{u.hostname}:{u.port}", **headers})
    assert conn.getresponse().status == status
    conn.close()
    assert not containers_of(docker_client, server.pid)


def test_a_session_flooded_with_calls_does_not_starve_another(start_http, workspace):
    """Session A sends more concurrent calls than a default thread pool holds (40), the first
    waiting for a file that session B writes. A's waiting calls hold no thread, so B's write runs;
    had they each held one, B would wait behind them and A's first call would time out."""
    server = start_http()
    from contextlib import AsyncExitStack

    async def main():
        async with AsyncExitStack() as stack:
            a = await open_session(stack, server.url)
            b = await open_session(stack, server.url)
            await a.call_tool("bash", {"command": "true"})
            results = []

            async def a_call(i):
                command = "touch started; until [ -f go ]; do sleep 0.1; done; echo ok" if i == 0 else "echo ok"
                results.append(await a.call_tool("bash", {"command": command, "timeout": 60}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(a_call, 0)
                while not (workspace / "started").exists():
                    await anyio.sleep(0.05)
                for i in range(1, 45):
                    tg.start_soon(a_call, i)
                await anyio.sleep(1)  # let A's other calls reach the server (sooner only makes this pass)
                wrote = await b.call_tool("write", {"path": "go", "content": "go\n"})
            return wrote, results

    wrote, results = anyio.run(main)
    assert not wrote.is_error
    assert len(results) == 45 and all(not r.is_error and text(r) == "ok\n" for r in results), \
        [text(r) for r in results if r.is_error][:3]
