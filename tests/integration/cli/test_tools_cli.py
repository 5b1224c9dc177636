"""`runner tools`, `runner call` and `runner session` as a user types them."""
from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.mark.parametrize("fmt, key", [("json", "parameters"), ("openai", "function"), ("anthropic", "input_schema"),
                                      ("mcp", "inputSchema")])
def test_tools_formats(run_cli, fmt, key):
    p = run_cli("tools", "--format", fmt)
    specs = json.loads(p.stdout)
    assert p.returncode == 0 and key in specs[0]
    names = {s.get("name") or s["function"]["name"] for s in specs}
    assert names == {"read", "write", "edit", "apply_patch", "bash", "ls", "glob", "grep", "result"}  # default: coding


def test_tools_table_preset_and_prompt(run_cli):
    p = run_cli("tools", "--preset", "git")
    assert p.returncode == 0 and "git_commit" in p.stdout.decode() and "builtin" in p.stdout.decode()
    p = run_cli("tools", "--prompt")
    assert p.stdout.decode().startswith("# Tools") and "## edit" in p.stdout.decode()
    p = run_cli("tools", "--format", "yaml")
    assert p.returncode == 2 and "unknown format" in p.stderr.decode()


def test_call_prints_the_result_and_exits_by_is_error(run_cli, tmp_path):
    (tmp_path / "a.txt").write_text("hello\n")
    p = run_cli("call", "read", '{"path": "a.txt"}', "--workspace", str(tmp_path))
    res = json.loads(p.stdout)
    assert p.returncode == 0 and res["content"] == "     1\thello" and res["is_error"] is False
    assert res["meta"]["tool"] == "read"
    p = run_cli("call", "read", '{"path": "missing.txt"}', "--workspace", str(tmp_path), "--executor", "local")
    assert p.returncode == 1 and json.loads(p.stdout)["is_error"]
    p = run_cli("call", "read", "{not json", "--workspace", str(tmp_path))
    assert p.returncode == 2 and "not valid JSON" in p.stderr.decode() and p.stdout == b""
    p = run_cli("call", "read", "{}", "--workspace", str(tmp_path / "nope"))
    assert p.returncode == 1 and "not a directory" in p.stderr.decode()


def test_commands_that_run_tools_say_loudly_what_is_no_sandbox(run_cli, tmp_path):
    """The local executor is no sandbox, and a workspace root owns makes a root sandbox: `runner
    call` and `runner session` say so on stderr, once, before the result (they said nothing)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    p = run_cli("call", "bash", '{"command": "id -u"}', "--workspace", str(ws), "--executor", "local")
    assert p.returncode == 0 and p.stderr.decode().count("runner: warning: executor local:") == 1, p.stderr
    assert "NOT a sandbox" in p.stderr.decode()
    p = run_cli("session", "--workspace", str(ws), "--policy", "local-dev",
                input=b'{"tool": "bash", "args": {"command": "true"}}\n' * 2)
    assert p.returncode == 0 and p.stderr.decode().count("NOT a sandbox") == 1, p.stderr
    p = run_cli("call", "bash", '{"command": "id -u"}', "--workspace", str(ws))
    assert json.loads(p.stdout)["content"] == "0\n"
    assert f"runner: warning: workspace {ws} is owned by root, so the sandbox's processes run as root" in p.stderr.decode()
    os.chown(ws, 1000, 1000)  # a workspace an unprivileged user owns: the sandbox is that user, and quiet
    p = run_cli("call", "bash", '{"command": "id -u"}', "--workspace", str(ws))
    assert json.loads(p.stdout)["content"] == "1000\n" and p.stderr == b"", p.stderr


def test_session_answers_in_order_with_one_sandbox(run_cli, tmp_path):
    calls = [{"id": 1, "tool": "write", "args": {"path": "n.txt", "content": "1\n"}},
             {"id": "b", "tool": "bash", "args": {"command": "cat n.txt; echo $$ > /tmp/pid; hostname"}},
             "not json",
             {"id": 3, "tool": "nope", "args": {}},
             {"id": 4, "tool": "bash", "args": {"command": "cat /tmp/pid >/dev/null && hostname"}}]
    stdin = "\n".join(c if isinstance(c, str) else json.dumps(c) for c in calls) + "\n"
    p = run_cli("session", "--workspace", str(tmp_path), input=stdin.encode())
    out = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert p.returncode == 0 and [o["id"] for o in out] == [1, "b", None, 3, 4]
    assert out[0]["content"] == "wrote 2 bytes to n.txt"
    assert out[1]["content"].startswith("1")
    host = out[1]["content"].splitlines()[-1]
    assert out[4]["content"].strip() == host  # the same sandbox throughout (its /tmp and hostname)
    assert out[2]["is_error"] and "line 3" in out[2]["content"]
    assert out[3]["is_error"] and "unknown tool: nope" in out[3]["content"]


def test_policy_option_and_protect(run_cli, tmp_path):
    (tmp_path / "keep").mkdir()
    p = run_cli("call", "write", '{"path": "keep/x", "content": "1"}', "--workspace", str(tmp_path), "--protect", "keep")
    assert p.returncode == 1 and "protected directory" in json.loads(p.stdout)["content"]
    p = run_cli("call", "write", '{"path": "x", "content": "1"}', "--workspace", str(tmp_path), "--policy", "readonly")
    assert p.returncode == 1 and "switched off by the policy readonly" in json.loads(p.stdout)["content"]
    p = run_cli("call", "ls", "{}", "--workspace", str(tmp_path), "--policy", "no-such-policy")
    assert p.returncode == 2 and "no-such-policy" in p.stderr.decode()


@pytest.mark.parametrize("call_id", [1.5, True, False, [], {}, "x" * 257, 10 ** 300])
def test_a_session_id_is_a_string_or_an_integer_and_nothing_else(call_id):
    """JSON's true is a Python int and 1.5 a number README did not promise: both are refused with
    the line's error, as a list or an over-long id is, and the session goes on."""
    from runner.cli import toolcalls as toolcli

    line = json.dumps({"id": call_id, "tool": "ls", "args": {}}).encode()
    with pytest.raises(ValueError, match="id must be a string or an integer"):
        toolcli._call_of(1, line)


@pytest.mark.parametrize("call_id", [None, 0, -3, "", "abc", "x" * 256, 10 ** 255])
def test_a_session_id_that_is_a_string_or_an_integer_is_taken(call_id):
    from runner.cli import toolcalls as toolcli

    msg = {"tool": "ls", "args": {}} | ({} if call_id is None else {"id": call_id})
    assert toolcli._call_of(1, json.dumps(msg).encode()) == (call_id, "ls", {})


@pytest.mark.parametrize("lifecycle", ["per-session", "per-call"])
def test_call_makes_one_sandbox_whatever_the_lifecycle(docker_client, tmp_path, lifecycle):
    """`runner call` makes one call: one container, told it serves one call. Under a per-call
    policy (multi-tenant's) it made three: the one it called in and the warm pool's two, started
    in the background and removed again (and a per-session sandbox loaded every tool module and
    lent its shells for a call that never came)."""
    import subprocess
    import time

    from .conftest import runner_cmd

    policy = tmp_path / "one.yaml"
    policy.write_text(f"extends: default\nsandbox:\n  lifecycle: {lifecycle}\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    since = time.time() - 1
    p = subprocess.Popen(runner_cmd("call", "bash", '{"command": "echo hi"}', "--workspace", str(ws),
                                    "--policy", str(policy)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and json.loads(out)["content"] == "hi\n", err.decode()
    events = docker_client.events(since=since, until=time.time() + 1, decode=True,
                                  filters={"type": "container", "event": "create",
                                           "label": f"runner.owner.pid={p.pid}"})
    assert len(list(events)) == 1
