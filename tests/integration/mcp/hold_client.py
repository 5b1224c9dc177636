"""An MCP client (the SDK's own) that starts a long bash call, prints `RUNNING` once output of it
arrives, and then waits to be killed.
Usage: python hold_client.py RUNNER-ARGS...   (starts `runner mcp` on stdio; prints `SERVER <pid>` first)
       python hold_client.py --url URL        (joins `runner mcp --http` at URL)"""
from __future__ import annotations

import os
import sys

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client


def children() -> list[str]:
    out: list[str] = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/children") as f:
            out += f.read().split()
    return out


def transport():
    if sys.argv[1] == "--url":
        return streamable_http_client(sys.argv[2])
    return stdio_client(StdioServerParameters(command=sys.executable, args=["-m", "runner", *sys.argv[1:]],
                                              env=dict(os.environ)))


async def main() -> None:
    async with transport() as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        if sys.argv[1] != "--url":
            print("SERVER", *children(), flush=True)
        said = False

        async def progress(done, total, message):
            nonlocal said
            if not said and "started" in (message or ""):
                said = True
                print("RUNNING", flush=True)

        await session.call_tool("bash", {"command": "echo started; sleep 600", "timeout": 900},
                                progress_callback=progress)
        print("the call ended; it should not have", flush=True)


anyio.run(main)
