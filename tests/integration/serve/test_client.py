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
        assert {"read", "bash"} <= {t.name for t in r.tools()}
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


def test_remote_runner_on_output_gets_each_line_while_the_command_runs(start_server, data, policy_file):
    """RemoteRunner.call(..., on_output=) as Runner.call: the command goes on only once the callback
    has had its first line (it creates a file in the session's workspace, which the command waits
    for), so the output came while the call ran; a callback that raises is dropped, the call is not."""
    key = add_tenant("live", data, policy_file)
    server = start_server("--data", str(data))
    with RemoteRunner(server.url, key) as r:
        r.call("write", {"path": "ready", "content": ""})
        ws = data / "workspaces" / "live" / r.session_id
        assert (ws / "ready").exists()
        seen: list[str] = []

        def on_output(text: str) -> None:
            seen.append(text)
            if "a\n" in "".join(seen):
                (ws / "go").touch()

        wait = "for i in $(seq 600); do [ -e go ] && break; sleep 0.1; done; [ -e go ] && echo seen || echo missing"
        res = r.call("bash", {"command": f"echo a; {wait}; echo b"}, on_output=on_output)
        assert not res.is_error and res.text == "a\nseen\nb\n" == "".join(seen), (seen, res.text)

        def broken(text: str) -> None:
            raise RuntimeError("consumer gone")

        res = r.call("bash", {"command": "echo x; echo y"}, on_output=broken)
        assert res.text == "x\ny\n" and res.meta["on_output_error"] == "RuntimeError: consumer gone"
        before = list(seen)
        assert r.call("read", {"path": "ready"}, on_output=seen.append).text == "(empty file)" and seen == before


def test_runner_exec_and_call_import_none_of_the_service_libraries():
    code = ("import sys, runner.cli, runner.client, runner.cli.toolcalls, runner.cli.exec_cmd; "
            "bad = [m for m in ('fastapi', 'uvicorn', 'sqlalchemy', 'alembic', 'psycopg', 'httpx', 'starlette') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
