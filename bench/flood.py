"""A flood of output through the servers, as their clients meet them: `runner mcp` on stdio driven
by the MCP SDK's own client (progress asked, so every piece of output crosses the server), and
`runner serve` over HTTP driven by httpx (the call, then `result` pages). The server process's RSS
is read from /proc before the flood, after it and at its peak (VmHWM): flat means it did not grow
with the output. Loopback only; each server is stopped and its sandboxes removed at the end.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.serve import serving

POLICY = "extends: default\nname: flood\nlimits: {memory: 256m}\n"
PAGES = 20


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _child_running(argv_part: str) -> int:
    """The pid of this process's child whose command line holds argv_part (the stdio server)."""
    me = str(os.getpid())
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = (d / "stat").read_text().rsplit(")", 1)[1].split()[1]
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if ppid == me and argv_part in cmd:
            return int(d.name)
    raise RuntimeError(f"no child running {argv_part!r}")


def _command(size: int) -> str:
    return f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {size}"


def _line(what: str, size: int, took: float, rss0: int, rss1: int, peak: int, pages: int, ptook: float) -> str:
    return (f"{what}: {size / 1e6:.0f} MB in {took:.1f}s ({size / took / 1e6:.0f} MB/s); server RSS "
            f"{rss0 / 1024:.0f} -> {rss1 / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB; {pages} `result` pages "
            f"({ptook / max(pages, 1) * 1000:.1f} ms each)")


def mcp_flood(size: int, results: dict) -> str:
    """`runner mcp` on stdio: one bash call with progress asked, then `result` pages."""
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    tmp = Path(tempfile.mkdtemp(prefix="runner-bench-mcp-"))
    (tmp / "ws").mkdir()
    (tmp / "p.yaml").write_text(POLICY)
    params = StdioServerParameters(command=sys.executable, args=["-m", "runner", "mcp", "--workspace", str(tmp / "ws"),
                                                                  "--policy", str(tmp / "p.yaml")])
    out: dict = {}

    async def main():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("bash", {"command": "true"})  # the sandbox is up
            pid = _child_running("runner mcp")
            rss0 = _status_kb(pid, "VmRSS")
            got = [0]

            async def progress(done, total, message):
                got[0] += len(message or "")

            t = time.perf_counter()
            res = await session.call_tool("bash", {"command": _command(size), "timeout": 900},
                                          progress_callback=progress)
            took = time.perf_counter() - t
            rss1 = _status_kb(pid, "VmRSS")
            call_id = ((res.meta or {}).get("runner/meta") or {}).get("call_id")
            pages, pt = 0, time.perf_counter()
            if call_id:
                for offset in range(1, PAGES * 2000, 2000):
                    page = await session.call_tool("result", {"call_id": call_id, "offset": offset, "limit": 2000})
                    pages += not page.is_error
            out.update(took=took, rss0=rss0, rss1=rss1, peak=_status_kb(pid, "VmHWM"), pages=pages,
                       ptook=time.perf_counter() - pt, progress_chars=got[0])

    try:
        anyio.run(main)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["mcp_flood_rss_growth"] = (max(out["rss1"], out["peak"]) - out["rss0"]) * 1024
    return (_line("`runner mcp` (stdio, MCP SDK client, progress asked)", size, out["took"], out["rss0"], out["rss1"],
                  out["peak"], out["pages"], out["ptook"])
            + f"; {out['progress_chars'] / 1e6:.0f} MB reached the client as progress")


def http_flood(size: int, results: dict) -> str:
    """`runner serve` over HTTP: one bash call in a session, then `result` pages."""
    import httpx

    tmp = Path(tempfile.mkdtemp(prefix="runner-bench-http-"))
    data = tmp / "data"
    (tmp / "p.yaml").write_text(POLICY)
    key = subprocess.run([sys.executable, "-m", "runner", "tenants", "add", "flood", "--policy", str(tmp / "p.yaml"), "--data", str(data)],
                         capture_output=True, text=True, check=True).stdout.strip()
    try:
        with serving(data) as (proc, url), \
                httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=900) as c:
            sid = c.post("/v1/sessions", json={}).raise_for_status().json()["id"]
            calls = f"/v1/sessions/{sid}/calls"
            c.post(calls, json={"tool": "bash", "args": {"command": "true"}}).raise_for_status()
            rss0 = _status_kb(proc.pid, "VmRSS")
            t = time.perf_counter()
            res = c.post(calls, json={"tool": "bash", "args": {"command": _command(size), "timeout": 900}})
            took = time.perf_counter() - t
            res.raise_for_status()
            rss1 = _status_kb(proc.pid, "VmRSS")
            body = res.json()
            call_id = (body.get("meta") or {}).get("call_id")
            pages, pt = 0, time.perf_counter()
            if call_id:
                for offset in range(1, PAGES * 2000, 2000):
                    page = c.post(calls, json={"tool": "result", "args": {"call_id": call_id, "offset": offset,
                                                                           "limit": 2000}})
                    pages += page.status_code == 200 and not page.json().get("is_error")
            ptook = time.perf_counter() - pt
            peak = _status_kb(proc.pid, "VmHWM")
            c.delete(f"/v1/sessions/{sid}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["http_flood_rss_growth"] = (max(rss1, peak) - rss0) * 1024
    return _line("`runner serve` (HTTP, httpx, /v1 calls)", size, took, rss0, rss1, peak, pages, ptook)


def flood_section(quick: bool, results: dict):
    size = 100 * 10 ** 6 if quick else 10 ** 9
    notes = []
    for fn in (mcp_flood, http_flood):
        try:
            notes.append(fn(size, results))
        except Exception as e:  # one server failing does not lose the other's figure
            notes.append(f"{fn.__name__}: FAILED: {type(e).__name__}: {e}")
    return [("flat memory through the servers: a flood, then `result` pages", [], notes)]
