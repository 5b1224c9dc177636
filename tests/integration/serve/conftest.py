"""`runner serve` as its users meet it: the real server process on a free loopback port, a real
HTTP client (httpx), tenants made with the real `runner tenants` command."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from ..mcp.conftest import wait_for  # noqa: F401 - the serve tests import it from here

# A policy for tests: one sandbox per session, no warm pool, rate limits out of the way.
POLICY = """\
extends: default
name: tiny
sandbox: {lifecycle: per-session, pool_size: 0}
limits: {memory: 256m, pids: 128, max_write: 64k, timeout: 60}
"""


def runner_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner", *args]


def fresh_minute(room: float = 20.0) -> None:
    """Quotas count calls per clock minute: start a quota check with `room` seconds of the minute
    left, so its few calls fall in one window (a wait, never an assertion on time)."""
    left = 60 - time.time() % 60
    if left < room:
        time.sleep(left + 0.05)


class Server:
    def __init__(self, proc: subprocess.Popen, url: str) -> None:
        self.proc, self.url = proc, url

    def client(self, key: str | None = None, **kw) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, **{"timeout": 120, **kw})

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("runner serve did not exit on SIGTERM") from None


@pytest.fixture
def data(tmp_path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


@pytest.fixture
def policy_file(tmp_path) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(POLICY)
    return p


def tenants(*args: str, data: Path | None = None, db: str | None = None) -> str:
    """`runner tenants ...`: its stdout (stderr must not leak into it)."""
    where = (["--db", db] if db else []) + (["--data", str(data)] if data else [])
    out = subprocess.run(runner_argv("tenants", *args, *where), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def add_tenant(name: str, data: Path | None, policy: Path, *extra: str, db: str | None = None) -> str:
    key = tenants("add", name, "--policy", str(policy), *extra, data=data, db=db).strip()
    assert key.startswith("rk_") and "\n" not in key
    return key


def session_containers(docker_client, sid: str) -> list[dict]:
    return docker_client.api.containers(all=True, filters={"label": ["runner.managed=true", f"runner.session={sid}"]})


def tenant_containers(docker_client, tenant: str) -> list[dict]:
    return docker_client.api.containers(all=True, filters={"label": ["runner.managed=true",
                                                                     f"runner.tenant={tenant}"]})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report carries the stderr of each server it started (a 500's traceback
    is there, nowhere else)."""
    rep = (yield).get_result()
    if rep.failed:
        for n, server in enumerate(getattr(item, "serve_servers", ()), 1):
            rep.sections.append((f"runner serve #{n} stderr", "".join(server.stderr)[-20000:]))


@pytest.fixture
def start_server(request, docker_client):
    """Start `runner serve --port 0` (the port it got is read from its stderr); at the end SIGTERM
    every server still running and check that each exits."""
    started: list[Server] = []
    request.node.serve_servers = started

    def start(*args: str, env: dict | None = None) -> Server:
        proc = subprocess.Popen(runner_argv("serve", "--port", "0", *args), env={**os.environ, **(env or {})},
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        lines = []
        while True:
            line = proc.stderr.readline().decode()
            lines.append(line)
            if not line:
                raise AssertionError("runner serve did not start:\n" + "".join(lines))
            if "listening on http://" in line:
                break
        url = line.split("listening on ")[1].split()[0]
        server = Server(proc, url)
        server.stderr = lines
        threading.Thread(target=lambda: lines.extend(line.decode() for line in proc.stderr), daemon=True).start()
        started.append(server)
        return server

    yield start
    for s in started:
        s.stop()
