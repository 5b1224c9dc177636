"""`runner mcp` on stdio, driven by the MCP SDK's own client against the real server (docker)."""
from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from .conftest import containers_of, gone, runner_argv, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")

# A 1x1 PNG.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def with_session(env, server_args, fn, message_handler=None):
    """Run `await fn(session)` against a fresh `runner mcp` on stdio; return what it returns."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "runner", *server_args], env=env)

    async def main():
        async with stdio_client(params) as (read, write), \
                ClientSession(read, write, message_handler=message_handler) as session:
            await session.initialize()
            return await fn(session)

    return anyio.run(main)


def text(res: types.CallToolResult) -> str:
    return "\n".join(b.text for b in res.content if isinstance(b, types.TextContent))


def test_tools_are_those_of_runner_tools_in_the_mcp_format(env, server_args, workspace, policy):
    async def go(session):
        return session.initialize_result, await session.list_tools()

    init, listed = with_session(env, server_args, go)
    assert init.server_info.name == "runner" and init.capabilities.tools.list_changed is True
    expected = json.loads(subprocess.run(runner_argv("tools", "--format", "mcp", "--workspace", str(workspace),
                                                     "--policy", str(policy)),
                                         env=env, capture_output=True, check=True).stdout)
    got = [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools]
    assert got == expected
    names = [t["name"] for t in got]
    assert "wordcount" in names and "refresh_tools" in names and "ls" not in names  # custom, allowed, denied
    wc = next(t for t in got if t["name"] == "wordcount")
    assert wc["description"].startswith("Count lines, words and characters of files\n\nPass file names")  # guidance


def test_file_tools_bash_grep_custom_tool_and_an_image(env, server_args, workspace):
    (workspace / "pixel.png").write_bytes(PNG)

    async def go(session):
        out = {}
        out["write"] = await session.call_tool("write", {"path": "notes/a.txt", "content": "alpha\nbeta\n"})
        out["edit"] = await session.call_tool("edit", {"path": "notes/a.txt", "old_string": "beta",
                                                       "new_string": "gamma"})
        out["read"] = await session.call_tool("read", {"path": "notes/a.txt"})
        out["grep"] = await session.call_tool("grep", {"pattern": "gam+a"})
        out["bash"] = await session.call_tool("bash", {"command": "id -u; pwd; cat notes/a.txt | wc -l"})
        out["custom"] = await session.call_tool("wordcount", {"args": "notes/a.txt"})
        out["image"] = await session.call_tool("read", {"path": "pixel.png"})
        return out

    out = with_session(env, server_args, go)
    assert not any(r.is_error for r in out.values()), {k: text(r) for k, r in out.items() if r.is_error}
    assert (workspace / "notes" / "a.txt").read_text() == "alpha\ngamma\n"
    assert text(out["read"]) == "     1\talpha\n     2\tgamma"
    assert "notes/a.txt:2:gamma" in text(out["grep"])
    assert text(out["bash"]).splitlines() == [str(os.getuid()), "/workspace", "2"]  # in the sandbox, as the user
    assert text(out["custom"]).split() == ["2", "2", "12", "notes/a.txt"]
    image = [b for b in out["image"].content if isinstance(b, types.ImageContent)]
    assert len(image) == 1 and image[0].mime_type == "image/png" and base64.b64decode(image[0].data) == PNG
    assert out["read"].meta["runner/meta"]["tool"] == "read"


def test_errors_are_results_with_is_error(env, server_args):
    async def go(session):
        return {
            "validation": await session.call_tool("read", {"path": 42}),
            "missing_arg": await session.call_tool("edit", {"path": "x"}),
            "gated": await session.call_tool("ls", {"path": "."}),
            "not_in_preset": await session.call_tool("http_fetch", {"url": "http://127.0.0.1:9/"}),
            "unknown": await session.call_tool("no_such_tool", {}),
            "timeout": await session.call_tool("bash", {"command": "echo before; sleep 60", "timeout": 1}),
            "after": await session.call_tool("bash", {"command": "echo still here"}),
        }

    out = with_session(env, server_args, go)
    assert all(out[k].is_error for k in ("validation", "missing_arg", "gated", "not_in_preset", "unknown", "timeout"))
    assert "path" in text(out["validation"]) and "old_string" in text(out["missing_arg"])
    assert "tool ls is denied by the policy" in text(out["gated"])
    assert "not allowed by the policy" in text(out["not_in_preset"])
    assert "unknown tool: no_such_tool" in text(out["unknown"])
    assert "before" in text(out["timeout"]) and "timed out after 1s" in text(out["timeout"])
    assert out["timeout"].meta["runner/meta"]["error_type"] == "timeout"
    assert not out["after"].is_error and text(out["after"]) == "still here\n"


def test_long_bash_output_comes_as_progress_only_when_asked(env, server_args):
    notes = []

    async def handler(message):
        if isinstance(message, types.ProgressNotification):
            notes.append(message)

    async def go(session):
        seen = []

        async def progress(done, total, message):
            seen.append((done, message))

        command = "for i in $(seq 1 5); do echo line $i; sleep 0.2; done"
        asked = await session.call_tool("bash", {"command": command}, progress_callback=progress)
        unasked = await session.call_tool("bash", {"command": command})
        return seen, asked, unasked

    seen, asked, unasked = with_session(env, server_args, go, message_handler=handler)
    assert text(asked) == text(unasked) == "".join(f"line {i}\n" for i in range(1, 6))
    assert "".join(m for _, m in seen) == text(asked)  # every piece of output, in order
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1][0] == len(text(asked))
    # Every progress notification belongs to the call that asked (one token), none to the other.
    assert len(notes) == len(seen) and len({n.params.progress_token for n in notes}) == 1


def test_refresh_tools_that_changes_the_list_sends_list_changed(env, server_args, workspace):
    changed, state = [], {}

    async def handler(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.append(message)
            state["arrived"].set()

    async def go(session):
        state["arrived"] = anyio.Event()
        before = {t.name for t in (await session.list_tools()).tools}
        same = await session.call_tool("refresh_tools", {})
        tool = workspace / "tools" / "stamp"
        tool.write_text(Path(__file__).resolve().parents[3].joinpath("examples/tools/executable/stamp").read_text())
        tool.chmod(0o755)
        added = await session.call_tool("refresh_tools", {})
        with anyio.fail_after(60):
            await state["arrived"].wait()
        after = {t.name for t in (await session.list_tools()).tools}
        stamped = await session.call_tool("stamp", {"args": "x y"})
        return before, same, added, after, stamped

    before, same, added, after, stamped = with_session(env, server_args, go, message_handler=handler)
    assert "stamp" not in before and after == before | {"stamp"}
    assert not same.is_error and not added.is_error and "stamp" in text(added)
    assert len(changed) == 1  # the refresh that changed nothing sent nothing
    assert text(stamped) == "1: x\n2: y\n"


def test_a_call_the_client_cancels_stops_and_the_next_call_runs_at_once(env, server_args, workspace):
    """The SDK's client sends notifications/cancelled when its request is abandoned: the call's
    sandbox goes under it, and the session's next call runs in a fresh one at once (it waited
    behind the cancelled call for its whole timeout before)."""
    async def go(session):
        async with anyio.create_task_group() as tg:
            async def long():
                await session.call_tool("bash", {"command": "touch started; sleep 600", "timeout": 900})
            tg.start_soon(long)
            with anyio.fail_after(120):
                while not (workspace / "started").exists():
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()
        with anyio.fail_after(90):
            return await session.call_tool("bash", {"command": "echo next; ls started"})

    res = with_session(env, server_args, go)
    assert not res.is_error and text(res) == "next\nstarted\n", text(res)  # the workspace stays


def hold(env, server_args):
    """A client process holding a long bash call: (the client, the server's pid)."""
    client = subprocess.Popen([sys.executable, str(Path(__file__).with_name("hold_client.py")), *server_args],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = client.stdout.readline().decode().split()
    assert line[:1] == ["SERVER"] and len(line) == 2, (line, client.stderr.read().decode()[-3000:])
    running = client.stdout.readline().decode().strip()
    assert running == "RUNNING", client.stderr.read().decode()[-3000:]
    return client, int(line[1])


@pytest.mark.parametrize("how", ["kill the client", "SIGTERM the server"])
def test_a_call_cut_short_leaves_no_container(env, server_args, docker_client, how):
    client, server = hold(env, server_args)
    try:
        assert containers_of(docker_client, server), "the long call runs in a container of the server"
        if how == "kill the client":
            client.send_signal(signal.SIGKILL)  # the server sees EOF on stdin
        else:
            os.kill(server, signal.SIGTERM)
        wait_for(lambda: gone(server), what="the server exits")
        wait_for(lambda: not containers_of(docker_client, server), what="the sandbox is removed")
    finally:
        client.kill()
        client.wait()


def test_an_orderly_shutdown_removes_the_sandbox(env, server_args, docker_client):
    async def go(session):
        await session.call_tool("bash", {"command": "true"})
        me = Path("/proc/self/task")
        kids = [int(p) for t in me.iterdir() for p in (t / "children").read_text().split()]
        return [k for k in kids if containers_of(docker_client, k)]

    servers = with_session(env, server_args, go)
    assert len(servers) == 1
    wait_for(lambda: gone(servers[0]), what="the server exits")
    assert not containers_of(docker_client, servers[0])
