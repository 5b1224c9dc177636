"""`runner mcp --dialect`, driven by the MCP SDK's own client against the real server (docker)."""
from __future__ import annotations

import json
import os
import sys

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

pytestmark = pytest.mark.usefixtures("no_leaks")


def text(res: types.CallToolResult) -> str:
    return "\n".join(b.text for b in res.content if isinstance(b, types.TextContent))


def with_session(args: list[str], fn):
    params = StdioServerParameters(command=sys.executable, args=["-m", "runner", "mcp", *args], env=dict(os.environ))

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await fn(session)

    return anyio.run(main)


def test_mcp_serves_forgekeepers_tools_and_answers(tmp_path):
    ws = tmp_path / "ws"
    (ws / "guarded").mkdir(parents=True)
    pol = tmp_path / "p.yaml"
    pol.write_text("extends: default\ntools: {preset: all}\n")

    async def go(session):
        out = {"tools": await session.list_tools()}
        out["write"] = await session.call_tool("write_file", {"file": "out.txt", "content": "Hello, World!"})
        out["again"] = await session.call_tool("write_file", {"file": "out.txt", "content": "x"})
        out["read"] = await session.call_tool("read_file", {"file": "out.txt", "maxBytes": 5})
        out["bash"] = await session.call_tool("run_bash", {"script": "sleep 5", "timeout_ms": 1500})
        out["guarded"] = await session.call_tool("write_file", {"file": "guarded/x", "content": "x"})
        out["native"] = await session.call_tool("read", {"path": "out.txt"})
        return out

    out = with_session(["--dialect", "forgekeeper", "--workspace", str(ws), "--policy", str(pol),
                        "--protect", "guarded"], go)
    names = [t.name for t in out["tools"].tools]
    assert "read_file" in names and "run_bash" in names and "read" not in names and "run_powershell" not in names
    rf = next(t for t in out["tools"].tools if t.name == "read_file")
    assert set(rf.input_schema["properties"]) == {"file", "encoding", "maxBytes"}
    assert json.loads(text(out["write"])) == {"ok": True, "path": "out.txt", "bytes": 13}
    assert out["again"].is_error and text(out["again"]) == "file exists (set overwrite=true to replace)"
    assert json.loads(text(out["read"])) == {"path": "out.txt", "bytes": 13, "readBytes": 5, "truncated": True,
                                             "encoding": "utf8", "content": "Hello"}
    assert out["bash"].is_error and "timed out after 1.5s" in text(out["bash"])
    assert out["guarded"].is_error and "protected directory" in text(out["guarded"])
    assert out["native"].is_error and text(out["native"]).startswith("unknown tool: read")
    assert (ws / "out.txt").read_text() == "Hello, World!" and not (ws / "guarded" / "x").exists()


def test_mcp_dialect_from_the_policy(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "main.go").write_text('fmt.Println("hello")\n')
    pol = tmp_path / "p.yaml"
    pol.write_text("extends: default\ndialect: go-agent\n")

    async def go(session):
        listed = await session.list_tools()
        edited = await session.call_tool("edit", {"path": "main.go", "old_text": "hello", "new_text": "world"})
        return listed, edited

    listed, edited = with_session(["--workspace", str(ws), "--policy", str(pol)], go)
    edit = next(t for t in listed.tools if t.name == "edit")
    assert set(edit.input_schema["properties"]) == {"path", "old_text", "new_text"}
    assert not edited.is_error and (ws / "main.go").read_text() == 'fmt.Println("world")\n'


def test_run_bash_output_is_relayed_as_progress_like_bash(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    pol = tmp_path / "p.yaml"
    pol.write_text("extends: default\ndialect: forgekeeper\n")
    seen: list[str] = []

    async def go(session):
        async def progress(done, total, message):
            seen.append(message)

        return await session.call_tool("run_bash", {"script": "for i in 1 2 3; do echo line $i; done"},
                                       progress_callback=progress)

    res = with_session(["--workspace", str(ws), "--policy", str(pol)], go)
    assert json.loads(text(res)) == {"shell": "/bin/bash", "stdout": "line 1\nline 2\nline 3\n", "stderr": ""}
    assert "".join(seen) == "line 1\nline 2\nline 3\n"  # the raw output as it came, before the answer's shape
