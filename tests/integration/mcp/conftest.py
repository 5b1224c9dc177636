"""`runner mcp` as MCP clients meet it: the real server process, driven by the SDK's own client."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tools"
POLICY = """\
extends: default
tools:
  allow: [refresh_tools]
  deny: [ls]
"""


def runner_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner", *args]


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    h.mkdir()
    return h


@pytest.fixture
def env(home):
    """The servers' environment: this one (its audit log in tmp), with a HOME of the test's own."""
    return {**os.environ, "HOME": str(home)}


@pytest.fixture
def workspace(tmp_path):
    """A workspace with a custom tool (an executable with NAME.md in tools/)."""
    ws = tmp_path / "ws"
    (ws / "tools").mkdir(parents=True)
    for name in ("wordcount", "wordcount.md"):
        shutil.copy2(EXAMPLES / "executable" / name, ws / "tools" / name)
    return ws


@pytest.fixture
def policy(tmp_path):
    p = tmp_path / "policy.yaml"
    p.write_text(POLICY)
    return p


@pytest.fixture
def server_args(workspace, policy):
    return ["mcp", "--workspace", str(workspace), "--policy", str(policy)]


def containers_of(docker_client, pid: int) -> list[str]:
    return [c["Id"] for c in docker_client.api.containers(
        all=True, filters={"label": ["runner.managed=true", f"runner.owner.pid={pid}"]})]


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or reaped between open and read
        return True


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    """Poll until predicate() is true; a bound on a wait, never a timing assertion."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not met within {timeout:g}s")


class HttpServer:
    def __init__(self, proc: subprocess.Popen, url: str) -> None:
        self.proc, self.url = proc, url

    @property
    def pid(self) -> int:
        return self.proc.pid


@pytest.fixture
def start_http(env, server_args, docker_client):
    """Start `runner mcp --http --port 0` (a free loopback port, announced on stderr); at the end
    SIGTERM it and check that it exits and leaves no container."""
    started = []

    def start(*extra: str) -> HttpServer:
        proc = subprocess.Popen(runner_argv(*server_args, "--http", "--port", "0", *extra), env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        started.append(proc)
        lines = []
        while "serving MCP on http://127.0.0.1:" not in (line := proc.stderr.readline().decode()):
            lines.append(line)  # (a warning first: a workspace root owns, as a test's is)
            assert line, "runner mcp --http did not start:\n" + "".join(lines)
        return HttpServer(proc, line.split()[-1])

    yield start
    for proc in started:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("runner mcp --http did not exit on SIGTERM") from None
        left = containers_of(docker_client, proc.pid)
        for cid in left:
            docker_client.api.remove_container(cid, force=True)
        assert not left, f"runner mcp --http left {len(left)} container(s) after SIGTERM"


def raw_request(url: str, method: str, headers: list[tuple[str, str]], body: bytes = b"") -> tuple[int, dict, bytes]:
    """One HTTP/1.1 request sent as written, a header twice if it is listed twice (HTTP clients
    fold or refuse that), over a socket to the loopback server at url: (status, headers, body)."""
    import socket
    from urllib.parse import urlsplit

    import h11

    u = urlsplit(url)
    conn = h11.Connection(h11.CLIENT)
    with socket.create_connection((u.hostname, u.port), timeout=120) as sock:
        sock.sendall(conn.send(h11.Request(method=method, target=u.path or "/", headers=[
            ("Host", u.netloc), *headers, ("Content-Length", str(len(body))), ("Connection", "close")])))
        sock.sendall(conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
        status, got, out = 0, {}, bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(sock.recv(65536))
            elif isinstance(event, h11.Response):
                status, got = event.status_code, {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                out += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return status, got, bytes(out)
