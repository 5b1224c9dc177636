"""RemoteRunner and `runner call --server`: the Runner's API against the real server; neither
imports the service's libraries."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runner.client import RemoteRunner
from runner.errors import RunnerError

from .conftest import add_tenant, runner_argv

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_remote_runner_and_runner_call_server(start_server, data, policy_file):
    key = add_tenant("cli", data, policy_file)
    server = start_server("--data", str(data))
    with RemoteRunner(server.url, key) as r:
        assert {"read", "bash"} <= {t["name"] for t in r.tools()}
        assert not r.call("write", {"path": "a.txt", "content": "hi\n"}).is_error
        assert "hi" in r.call("read", {"path": "a.txt"}).text
        assert r.get_file("a.txt") == b"hi\n"
        r.put_file("b.bin", b"\x00\x01")
        assert r.call("bash", {"command": "wc -c < b.bin"}).text.strip() == "2"
        assert r.call("read", {"path": "nope"}).is_error
        sid = r.session_id
    with pytest.raises(RunnerError, match="401"):
        RemoteRunner(server.url, "rk_bad_key").start()
    with RemoteRunner(server.url, key) as other:
        with pytest.raises(RunnerError, match="410"):
            other._request("GET", f"/v1/sessions/{sid}")
    out = subprocess.run(runner_argv("call", "bash", '{"command": "echo remote"}', "--server", server.url,
                                     "--key", key), capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["content"] == "remote\n"
    bad = subprocess.run(runner_argv("call", "ls", "{}", "--server", server.url, "--key", "rk_x_y"),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "401" in bad.stderr and bad.stdout == ""


def test_runner_exec_and_call_import_none_of_the_service_libraries():
    code = ("import sys, runner.cli, runner.client, runner.cli.toolcalls, runner.cli.exec_cmd; "
            "bad = [m for m in ('fastapi', 'uvicorn', 'sqlalchemy', 'alembic', 'psycopg', 'httpx', 'starlette') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
