"""The servers read request headers one way (runner/servers/httpheaders.py): the logic, and that no
server module reads a request header any other way. The servers themselves, with a header sent
twice over a socket: tests/integration/serve/test_mcp_tenants.py, tests/integration/mcp/test_http_sessions.py."""
from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

from runner.servers.httpheaders import GUARDED, DuplicateHeader, duplicated, header, refuse_duplicates

ROOT = Path(__file__).resolve().parents[3]
SERVERS = [ROOT / "runner" / "servers/mcp.py", *sorted((ROOT / "runner" / "serve").glob("*.py"))]


def scope(*pairs: tuple[str, str]) -> dict:
    return {"type": "http", "headers": [(k.encode(), v.encode()) for k, v in pairs]}


def test_a_header_is_its_one_copy_and_two_copies_are_refused():
    s = scope(("authorization", "Bearer a"), ("accept", "x"), ("accept", "y"))
    assert header(s, "authorization") == "Bearer a"
    assert header(s, "mcp-session-id") is None
    assert duplicated(s) is None  # accept is read by nobody here: its copies decide nothing
    two = scope(("mcp-session-id", "victim"), ("authorization", "Bearer a"), ("mcp-session-id", "mine"))
    assert duplicated(two) == "mcp-session-id"
    with pytest.raises(DuplicateHeader):
        header(two, "mcp-session-id")
    with pytest.raises(ValueError):  # a header read must be guarded against copies first
        header(s, "accept")


def test_refuse_duplicates_answers_400_before_the_app_reads_anything():
    reached, sent = [], []

    async def app(scope, receive, send):
        reached.append(scope)

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b""}

    for name in sorted(GUARDED):
        anyio.run(refuse_duplicates(app), scope((name, "a"), (name.upper(), "b")), receive, send)
    assert not reached
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [400] * len(GUARDED)
    anyio.run(refuse_duplicates(app), scope(("authorization", "Bearer a")), receive, send)
    assert len(reached) == 1


@pytest.mark.parametrize("path", SERVERS, ids=lambda p: p.name)
def test_the_servers_read_request_headers_only_through_the_helper(path):
    """A dict of the headers takes the last copy, starlette's `headers.get` the first: neither
    may read a request header in the servers (responses' headers are theirs to write)."""
    src = path.read_text()
    found = re.findall(r"request\.headers|scope\.get\(\"headers\"\)|scope\[\"headers\"\]", src)
    assert not found, f"{path.name} reads request headers without runner.servers.httpheaders.header: {found}"
