"""TEMPORARY fixtures for the behaviour suite: the agent as a local subprocess over its protocol.

The lead replaces `call` with one parametrised over Runner(executor="local"|"docker"). The
contract the suite relies on:

- `workspace`: a fresh directory (pathlib.Path) the test writes files into directly;
- `call(tool, args)`: validates args with the registry and runs the tool in that workspace,
  answering an object with `.content` (str or list of blocks), `.is_error`, `.text`, `.meta`;
  unknown tools and bad arguments are error answers, as Runner.call gives them;
- network: mode `none`, unless the test uses the `http_server` fixture, in which case mode is
  `allowlist` with exactly that server's `127.0.0.1:PORT` listed.
"""
from __future__ import annotations

import http.server
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from runner.tools import registry
from tests.agent.agentproc import AgentProc, compose


@dataclass
class Answer:
    content: Any
    is_error: bool = False
    meta: dict = field(default_factory=dict)

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.get("text", "") if b.get("type") == "text" else f"[image {b.get('media_type')}]"
                         for b in self.content)


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict = {}

    def do_GET(self):  # noqa: N802
        route = self.server.routes.get(self.path.split("?")[0])
        if route is None:
            self.send_response(404)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"not here")
            return
        status, headers, body = route(self) if callable(route) else route
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def http_server():
    """A local HTTP server on 127.0.0.1; `server.routes[path] = (status, headers, body)`;
    `server.base` is its URL; `server.hits` counts requests."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.routes = {}
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    srv.hostport = f"127.0.0.1:{srv.server_address[1]}"
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


class Tripwire:
    """A listening loopback port that records whether anything connected to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.setblocking(False)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"

    def connected(self) -> bool:
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return False
        conn.close()
        return True


@pytest.fixture
def tripwire():
    t = Tripwire()
    yield t
    t.sock.close()


@pytest.fixture
def call(workspace, request):
    hello = {}
    if "http_server" in request.fixturenames:
        srv = request.getfixturevalue("http_server")
        hello["network"] = {"mode": "allowlist", "allow": [srv.hostport]}
    agent = AgentProc(workspace, **hello)
    assert agent.hello_reply["ok"], agent.hello_reply

    def run(tool: str, args: dict | None = None) -> Answer:
        if not registry.exists(tool):
            return Answer(registry.unknown_tool_message(tool), True, {"error_type": "validation"})
        try:
            canonical = registry.validate_args(tool, args if args is not None else {})
        except registry.ToolArgError as e:
            return Answer(str(e), True, {"error_type": "validation"})
        if registry.get(tool).where != "sandbox":
            pytest.skip(f"{tool} runs on the controller")
        res = compose(agent.call(tool, canonical))
        return Answer(res["content"], res["is_error"], res["meta"])

    yield run
    agent.close()
