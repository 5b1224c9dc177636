"""--dialect on `runner call`, `runner session` and `runner tools`, and `dialect:` in a policy,
as a user types them (the real CLI, the docker executor)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("no_leaks")

TOOLS = {  # each dialect's tools under the preset all, in the order `runner tools` prints them
    "ah": ["read", "write", "edit", "bash", "result"],
    "forgekeeper": ["echo", "get_time", "read_file", "read_dir", "write_file", "http_fetch", "git_status", "git_diff",
                    "git_add", "git_commit", "git_push", "git_pull", "run_bash", "refresh_tools", "result"],
    "go-agent": ["read", "bash", "edit", "write", "grep", "find", "ls", "web_search", "web_fetch", "result"],
    "miclaw": ["read", "write", "edit", "apply_patch", "grep", "glob", "ls", "exec", "process", "memory_search",
               "memory_get", "result"],
}


def cli(*args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner", *args], input=input, capture_output=True, timeout=300,
                          env=dict(os.environ))


@pytest.fixture
def policy_all(tmp_path):
    p = tmp_path / "all.yaml"
    p.write_text("extends: default\ntools: {preset: all}\n")
    return str(p)


@pytest.mark.parametrize("dialect", list(TOOLS))
def test_tools_openai_prints_the_dialects_schemas(dialect, policy_all, tmp_path):
    p = cli("tools", "--dialect", dialect, "--format", "openai", "--policy", policy_all, "--workspace", str(tmp_path))
    assert p.returncode == 0, p.stderr
    specs = json.loads(p.stdout)
    assert [s["function"]["name"] for s in specs] == TOOLS[dialect]
    assert all(s["type"] == "function" and s["function"]["parameters"]["type"] == "object" for s in specs)


def test_tools_schemas_say_the_seeds_names_and_units(policy_all, tmp_path):
    def schema(dialect, tool):
        p = cli("tools", "--dialect", dialect, "--format", "openai", "--policy", policy_all,
                "--workspace", str(tmp_path))
        return next(s["function"]["parameters"] for s in json.loads(p.stdout) if s["function"]["name"] == tool)

    fk = schema("forgekeeper", "read_file")
    assert set(fk["properties"]) == {"file", "encoding", "maxBytes"} and fk["required"] == ["file"]
    wf = schema("forgekeeper", "write_file")
    assert wf["properties"]["overwrite"]["default"] is False
    rb = schema("forgekeeper", "run_bash")
    assert rb["properties"]["timeout_ms"]["default"] == 15000 and "milliseconds" in rb["properties"]["timeout_ms"][
        "description"]
    assert "milliseconds" in schema("ah", "bash")["properties"]["timeout"]["description"]
    go = schema("go-agent", "bash")["properties"]["timeout"]
    assert go["default"] == 120 and "seconds" in go["description"]
    assert set(schema("go-agent", "edit")["properties"]) == {"path", "old_text", "new_text"}
    ex = schema("miclaw", "exec")["properties"]
    assert ex["timeout"]["default"] == 1800 and "seconds" in ex["timeout"]["description"] and "env" not in ex


def test_tools_table_says_what_is_not_offered(policy_all, tmp_path):
    p = cli("tools", "--dialect", "forgekeeper", "--policy", policy_all, "--workspace", str(tmp_path))
    out = p.stdout.decode()
    assert p.returncode == 0 and "read_file" in out
    for tool in ("write_repo_file", "run_powershell", "restart_frontend", "create_task_card", "check_pr_status"):
        assert f"forgekeeper dialect: not offered: {tool}: " in out
    p = cli("tools", "--dialect", "forgekeeper", "--format", "json", "--policy", policy_all, "--workspace", str(tmp_path))
    assert "run_powershell" not in p.stdout.decode()  # never a schema for it
    assert "not offered: run_powershell" in p.stderr.decode()
    p = cli("tools", "--dialect", "nope", "--workspace", str(tmp_path))
    assert p.returncode == 2 and "dialect" in p.stderr.decode()


def test_call_with_dialect(tmp_path):
    (tmp_path / "notes.txt").write_text("hello world\n")
    p = cli("call", "--dialect", "forgekeeper", "read_file", '{"file": "notes.txt", "maxBytes": 5}',
            "--workspace", str(tmp_path))
    res = json.loads(p.stdout)
    assert p.returncode == 0, p.stderr
    assert json.loads(res["content"]) == {"path": "notes.txt", "bytes": 12, "readBytes": 5, "truncated": True,
                                          "encoding": "utf8", "content": "hello"}
    assert (res["meta"]["dialect"], res["meta"]["dialect_tool"], res["meta"]["tool"]) == ("forgekeeper", "read_file",
                                                                                         "read")
    p = cli("call", "--dialect", "forgekeeper", "write_file", '{"file": "notes.txt", "content": "x"}',
            "--workspace", str(tmp_path))
    assert p.returncode == 1 and json.loads(p.stdout)["content"] == "file exists (set overwrite=true to replace)"
    assert (tmp_path / "notes.txt").read_text() == "hello world\n"


def test_session_with_dialect_keeps_one_sandbox(tmp_path):
    lines = [{"id": 1, "tool": "write", "args": {"path": "a.go", "content": "x := 1\n"}},
             {"id": 2, "tool": "edit", "args": {"path": "a.go", "old_text": "1", "new_text": "2"}},
             {"id": 3, "tool": "bash", "args": {"command": "cat a.go; echo $$ > /tmp/pid", "timeout": 30}},
             {"id": 4, "tool": "bash", "args": {"command": "test -f /tmp/pid && echo same-sandbox"}},
             {"id": 5, "tool": "edit", "args": {"path": "a.go"}}]
    p = cli("session", "--dialect", "go-agent", "--workspace", str(tmp_path),
            input="".join(json.dumps(x) + "\n" for x in lines).encode())
    out = [json.loads(x) for x in p.stdout.decode().splitlines()]
    assert p.returncode == 0 and [o["id"] for o in out] == [1, 2, 3, 4, 5]
    assert [o["is_error"] for o in out] == [False, False, False, False, True]
    assert out[2]["content"] == "x := 2\n" and out[3]["content"] == "same-sandbox\n"
    assert out[4]["content"] == 'validation error: missing required parameter "old_text"; missing required parameter ' \
                                '"new_text"'


def test_policy_names_the_dialect(tmp_path):
    pol = tmp_path / "miclaw.yaml"
    pol.write_text("extends: default\ndialect: miclaw\n")
    p = cli("tools", "--format", "json", "--policy", str(pol), "--workspace", str(tmp_path))
    assert p.returncode == 0 and [s["name"] for s in json.loads(p.stdout)] == [
        "read", "write", "edit", "apply_patch", "grep", "glob", "ls", "result"]  # coding: no exec, no process
    (tmp_path / "f.txt").write_text("a\nb\n")
    p = cli("call", "read", '{"path": "f.txt", "offset": 1}', "--policy", str(pol), "--workspace", str(tmp_path))
    assert json.loads(p.stdout)["content"] == "     2\tb"  # miclaw's 0-based offset
    p = cli("call", "--dialect", "ah", "read", '{"path": "f.txt", "offset": 1}', "--policy", str(pol),
            "--workspace", str(tmp_path))
    assert json.loads(p.stdout)["content"] == "     1\ta\n     2\tb"  # --dialect wins over the policy's
    bad = tmp_path / "bad.yaml"
    bad.write_text("dialect: claude\n")
    p = cli("policy", "check", str(bad))
    assert p.returncode == 1 and "dialect" in p.stderr.decode()
