"""Issue 43's review: attacks by someone who did not write the fixes, on the real server on a
loopback port with real clients. Each test here failed before its fix."""
from __future__ import annotations

import resource
import socket
import subprocess
import sys
import threading

import httpx
import pytest

from .conftest import POLICY, Server, add_tenant
from .test_flood import HALF_OPEN, half_open, start


# made by the sandbox in its workspace: a UNIX socket, a FIFO, a directory no one may enter
SHAPES = ("python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\"; mkfifo fifo; "
          "mkdir -p shut/in && echo x > shut/in/f && chmod 000 shut; ls -la")


@pytest.mark.usefixtures("no_leaks")
def test_a_socket_fifo_or_shut_directory_in_the_workspace_is_a_clear_refusal_on_the_file_routes(
        start_server, data, policy_file):
    """GET of a UNIX socket the sandbox bound in its workspace answered 500 (open gave ENXIO,
    which only a link or a missing file was turned into an answer for) and reset the client's
    connection. Every shape is a 4xx naming the path, on GET and PUT, and the server goes on."""
    key = add_tenant("acme", data, policy_file)
    server = start_server("--data", str(data))
    with server.client(key) as c:
        sid = c.post("/v1/sessions", json={}).json()["id"]
        r = c.post(f"/v1/sessions/{sid}/calls", json={"tool": "bash", "args": {"command": SHAPES}})
        assert "sock" in r.json()["content"] and "fifo" in r.json()["content"], r.text
        for method, path in [("GET", "sock"), ("GET", "fifo"), ("GET", "sock/x"), ("GET", "fifo/x"),
                             ("PUT", "sock"), ("PUT", "fifo"), ("PUT", "sock/x"), ("PUT", "fifo/x")]:
            r = c.request(method, f"/v1/sessions/{sid}/files/{path}", content=b"x" if method == "PUT" else None)
            assert r.status_code == 422, (method, path, r.status_code, r.text)
            assert path.split("/")[0] in r.text, r.text
        for method in ("GET", "PUT"):  # root may enter it; any other server user is refused: never a 500
            r = c.request(method, f"/v1/sessions/{sid}/files/shut/in/f", content=b"y" if method == "PUT" else None)
            assert r.status_code in (200, 204, 403), (method, r.status_code, r.text)
        assert c.get(f"/v1/sessions/{sid}").status_code == 200
        assert c.delete(f"/v1/sessions/{sid}").status_code == 204


def start_mcp_http(policy, nofile: int = 4096) -> Server:
    """`runner mcp --http` on a loopback port under an open-files limit; .url is its root."""
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    proc = subprocess.Popen([sys.executable, "-m", "runner", "mcp", "--http", "--port", "0", "--policy", str(policy)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limit)
    while "serving MCP on http://" not in (line := proc.stderr.readline().decode()):
        assert line, "runner mcp --http did not start"
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    return Server(proc, line.split("serving MCP on ")[1].split()[0].rsplit("/mcp", 1)[0])


def _exchange(url: str, request: bytes) -> bytes:
    """Everything the server answers `request` on one connection, until it closes or goes quiet."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(request)
        got = b""
        try:
            while chunk := s.recv(65536):
                got += chunk
        except TimeoutError:
            got += b"<still open>"
        return got


@pytest.mark.parametrize("server_kind", ["serve", "mcp"])
def test_a_body_framed_two_ways_is_refused_and_the_connection_closed(tmp_path, server_kind):
    """Content-Length and Transfer-Encoding together: h11 frames the body by the chunks, anything
    reading Content-Length (the body limit, a proxy in front) by the length. Both servers took it
    (201, and a request hidden in the 'body' answered on the same connection: a smuggled request
    for any front end that frames by length). Now 400 and the connection closed, nothing after it
    read; each header alone still works."""
    data = tmp_path / "data"
    data.mkdir()
    policy = tmp_path / "tiny.yaml"
    policy.write_text(POLICY)
    key = add_tenant("acme", data, policy).encode()
    if server_kind == "serve":
        server = start(data, nofile=4096)
        path, auth = b"/v1/sessions", b"Authorization: Bearer " + key + b"\r\n"
    else:
        server = start_mcp_http(policy)
        path, auth = b"/mcp", b""
    host = server.url.split("//")[1].encode()  # the SDK's Host check wants the address it serves on
    hidden = b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\n" + auth + b"\r\n"
    try:
        both = (b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\n" + auth
                + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % (5 + len(hidden)) + hidden)
        got = _exchange(server.url, both)
        assert got.startswith(b"HTTP/1.1 400"), got[:300]
        assert got.count(b"HTTP/1.1 ") == 1 and not got.endswith(b"<still open>"), got
        # the same request framed one way is answered as usual
        one = _exchange(server.url, b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\n" + auth
                        + b"Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        assert not one.startswith(b"HTTP/1.1 400"), one[:300]
    finally:
        server.stop()


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "review", "version": "1"}}}


def test_runner_mcp_http_answers_while_1100_half_open_connections_are_held(tmp_path):
    """`runner mcp --http` (no key guards it) ran uvicorn unbounded: 1100 connections whose head
    never ends, under the 1024-descriptor limit many hosts give, and 0 of 3 initializes answered
    (timeouts). It has runner serve's connection bounds now."""
    policy = tmp_path / "tiny.yaml"
    policy.write_text(POLICY)
    server = start_mcp_http(policy, nofile=1024)
    socks = []
    try:
        socks = half_open(server.url, HALF_OPEN)
        answers = []
        for _ in range(3):
            try:
                r = httpx.post(server.url + "/mcp", json=INITIALIZE, timeout=20,
                               headers={"Accept": "application/json, text/event-stream"})
                answers.append(r.status_code)
            except httpx.HTTPError as e:
                answers.append(type(e).__name__)
        print(f"\nheld {len(socks)} half-open; answers {answers}")
        assert answers == [200] * 3, answers
    finally:
        for s in socks:
            s.close()
        server.stop()


def _initialize(c: httpx.Client) -> httpx.Response:
    return c.post("/mcp", json=INITIALIZE, headers={"Accept": "application/json, text/event-stream"})


@pytest.mark.usefixtures("no_leaks")
def test_mcp_session_creations_and_deletions_count_against_the_tenants_session_ops(start_server, data, policy_file):
    """--max-session-ops-per-minute held on /v1 only: MCP sessions (each a workspace and a sandbox
    made and removed) were opened and ended without bound (4 initializes and 2 DELETEs under a
    cap of 3, all taken). /mcp and /v1 now count into the one place."""
    key = add_tenant("churn", data, policy_file)
    server = start_server("--data", str(data), "--max-session-ops-per-minute", "3")
    with server.client(key) as c:
        a, b = _initialize(c), _initialize(c)
        assert a.status_code == b.status_code == 200, (a.text, b.text)
        ids = [r.headers["mcp-session-id"] for r in (a, b)]
        assert c.delete("/mcp", headers={"Mcp-Session-Id": ids[0], "Mcp-Protocol-Version": "2025-06-18"}).status_code == 200
        over = _initialize(c)
        assert over.status_code == 429 and 0 < int(over.headers["retry-after"]) <= 60, over.text
        gone = c.delete("/mcp", headers={"Mcp-Session-Id": ids[1], "Mcp-Protocol-Version": "2025-06-18"})
        assert gone.status_code == 429, gone.text
        assert c.post("/v1/sessions", json={}).status_code == 429  # one count for both routes
