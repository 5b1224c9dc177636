"""The command line against hostile input: JSON nested or sized to break the parser, control
characters that would forge lines or drive the terminal, and signals that must not leave a
sandbox behind. Every test runs the real `runner` process; the signal tests use the real engine."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.reporting.audit import AuditLog

HOSTILE_TEXT = "c1\n2026-01-01T00:00:00.000Z  forged/c9  bash  ok\x1b[2J\x1b]0;owned\x07\r\x9b31m\u2028\u202e"
FORBIDDEN = ("\x1b", "\x07", "\r", "\x9b", "\u2028", "\u202e")
DEEP = "[" * 200_000 + "]" * 200_000


def runner_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner", *args]


def run(*args: str, input: bytes = b"", env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(runner_cmd(*args), input=input, capture_output=True, timeout=600,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def policy_all(tmp_path):
    p = tmp_path / "all.yaml"
    p.write_text("extends: default\ntools: {preset: all}\nsandbox: {executor: local}\n")
    return str(p)


# -- (a) JSON that breaks parsers ----------------------------------------------------------------
def test_a_deeply_nested_session_line_is_an_error_for_that_line_only(tmp_path, policy_all):
    lines = [json.dumps({"id": 1, "tool": "echo", "args": {"text": "before"}}),
             '{"id": 2, "tool": "echo", "args": {"text": ' + DEEP + "}}",
             DEEP,
             '{"id": 4, "tool": "echo", "args": {"text": "x", "more": ' + "[" * 500 + "]" * 500 + "}}",
             json.dumps({"id": 5, "tool": "echo", "args": {"text": "after"}})]
    p = run("session", "--workspace", str(tmp_path), "--policy", policy_all, input="\n".join(lines).encode() + b"\n")
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    out = [json.loads(x) for x in p.stdout.decode().splitlines()]
    assert [o["content"] for o in (out[0], out[-1])] == ["before", "after"] and len(out) == 5
    for o in out[1:4]:
        assert o["is_error"] and "nested" in o["content"] and o["meta"]["error_type"] == "validation", o


def test_an_oversized_session_line_is_an_error_and_the_session_goes_on(tmp_path, policy_all):
    from runner.controller.guards import ARGS_MAX_BYTES

    big = json.dumps({"id": 1, "tool": "echo", "args": {"text": "x" * (ARGS_MAX_BYTES + 2 * 1024 * 1024)}})
    after = json.dumps({"id": 2, "tool": "echo", "args": {"text": "after"}})
    p = run("session", "--workspace", str(tmp_path), "--policy", policy_all, input=(big + "\n" + after + "\n").encode())
    out = [json.loads(x) for x in p.stdout.decode().splitlines()]
    assert p.returncode == 0 and len(out) == 2
    assert out[0]["is_error"] and "line 1" in out[0]["content"] and "bytes" in out[0]["content"]
    assert out[1]["content"] == "after"


def test_deeply_nested_call_arguments_are_a_usage_error(tmp_path):
    deep = "[" * 60_000 + "]" * 60_000  # one argument of the command line holds at most 128 KiB
    p = run("call", "echo", deep, "--workspace", str(tmp_path), "--executor", "local")
    err = p.stderr.decode()
    assert p.returncode == 2 and "nested" in err and "Traceback" not in err and "RecursionError" not in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("text, says", [
    ("tools:\n  allow: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
     + "tools: {allow: *i}\n", "aliases"),
])
def test_hostile_policy_files_are_refused_with_a_clear_line(tmp_path, text, says):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    p = run("policy", "check", str(f))
    err = p.stderr.decode()
    assert p.returncode in (1, 2) and says in err and "Traceback" not in err and "RecursionError" not in err, err


@pytest.mark.parametrize("given", ["strict", "extends"])
def test_a_policy_name_never_reads_a_file_of_the_workspace(tmp_path, given):
    """A policy name that is no preset fell back to a file of that name in the current
    directory, which is the workspace by default: a `strict` the agent left there (executor
    local, and the workspace then the host) was the policy of the next `runner call --policy
    strict` whose RUNNER_POLICY_DIR was not set. The same held for `extends: NAME`."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "strict").write_text("sandbox: {executor: local}\ntools: {preset: all}\n")
    args = ["--policy", "strict"]
    if given == "extends":
        (tmp_path / "mine.yaml").write_text("extends: strict\n")
        args = ["--policy", str(tmp_path / "mine.yaml")]
    here = str(Path(__file__).resolve().parents[3])  # this runner, run from the workspace
    env = {**os.environ, "RUNNER_POLICY_DIR": "", "PYTHONPATH": os.pathsep.join(
        [here, *filter(None, [os.environ.get("PYTHONPATH")])])}
    p = subprocess.run(runner_cmd("call", "bash", '{"command": "echo ran-on-the-host"}', *args), cwd=ws,
                       capture_output=True, timeout=600, env=env)
    out, err = p.stdout.decode(), p.stderr.decode()
    assert "ran-on-the-host" not in out, out
    assert p.returncode != 0 and "unknown policy 'strict'" in err, (out, err)


# -- (b) control characters in what is printed ---------------------------------------------------
def test_audit_tail_and_show_never_print_control_characters(tmp_path, policy_all):
    log = tmp_path / "audit.jsonl"
    env = {"RUNNER_AUDIT_LOG": str(log)}
    calls = [{"id": HOSTILE_TEXT, "tool": "echo", "args": {"text": HOSTILE_TEXT}},
             {"id": "c2", "tool": HOSTILE_TEXT, "args": {}}]
    p = run("session", "--workspace", str(tmp_path), "--policy", policy_all, env=env,
            input="".join(json.dumps(c) + "\n" for c in calls).encode())
    assert p.returncode == 0, p.stderr
    raw = log.read_text(encoding="utf-8")
    assert len(raw.splitlines()) == 2 and [json.loads(x)["call_id"] for x in raw.splitlines()] == [HOSTILE_TEXT, "c2"]
    assert not any(c in raw for c in FORBIDDEN)
    for args in (["audit", "tail"], ["audit", "tail", "--json"], ["audit", "show", HOSTILE_TEXT]):
        p = run(*args, env=env)
        out = p.stdout.decode()
        assert p.returncode == 0 and "forged" in out, (args, p.stderr)
        assert not any(c in out for c in FORBIDDEN), (args, out)
        if args[1] == "tail":
            assert len(out.splitlines()) == 2, out
        if args[1] == "show" or "--json" in args:  # JSON: one line per record (show was indented)
            ids = [json.loads(line)["call_id"] for line in out.splitlines()]
            assert ids == ([HOSTILE_TEXT] if args[1] == "show" else [HOSTILE_TEXT, "c2"]), out
    assert [r["call_id"] for r in AuditLog(log).tail(5)] == [HOSTILE_TEXT, "c2"]


def test_session_and_call_output_is_one_json_line_whatever_a_result_holds(tmp_path, policy_all):
    p = run("session", "--workspace", str(tmp_path), "--policy", policy_all,
            input=json.dumps({"id": HOSTILE_TEXT, "tool": "echo", "args": {"text": HOSTILE_TEXT}}).encode() + b"\n")
    out = p.stdout.decode()
    assert len(out.splitlines()) == 1 and not any(c in out for c in FORBIDDEN), out
    assert json.loads(out)["content"] == HOSTILE_TEXT and json.loads(out)["id"] == HOSTILE_TEXT
    p = run("call", "echo", json.dumps({"text": HOSTILE_TEXT}), "--workspace", str(tmp_path), "--policy", policy_all)
    out = p.stdout.decode()
    assert len(out.splitlines()) == 1 and not any(c in out for c in FORBIDDEN)
    assert json.loads(out)["content"] == HOSTILE_TEXT


def test_runner_tools_escapes_what_the_workspace_wrote(tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "nice").write_text("#!/bin/sh\necho hi\n")
    (tools / "nice.md").write_text("---\ndescription: fine\x1b[2J\x1b]0;owned\x07 then\x9b2Kforged\u202e\n---\n"
                                   "guide\x1b[31m\n")
    (tools / "broken").write_text("#!/bin/sh\nprintf 'boom\\033[2J\\033]0;owned\\007\\nrunner: forged line\\n' >&2\n"
                                  "exit 3\n")
    for t in ("nice", "broken"):
        (tools / t).chmod(0o755)
    for args in (["tools"], ["tools", "--prompt"], ["tools", "--format", "json"]):
        p = run(*args, "--workspace", str(tmp_path), "--executor", "local")
        out, err = p.stdout.decode(), p.stderr.decode()
        assert p.returncode == 0 and "nice" in out, err
        assert not any(c in out + err for c in FORBIDDEN), (args, out, err)
        assert "boom" in err and not any(line.startswith("runner: forged") for line in err.splitlines()), err
    table = run("tools", "--workspace", str(tmp_path), "--executor", "local").stdout.decode()
    assert len([x for x in table.splitlines() if "fine" in x]) == 1 and "forged" in table


# -- (c) signals ---------------------------------------------------------------------------------
def _containers(client, pid: int) -> list[dict]:
    return client.api.containers(all=True, filters={"label": f"runner.owner.pid={pid}"})


def _running(client, pid: int, program: str):
    """The container of that runner process once `program` runs in it."""
    for c in _containers(client, pid):
        if c["State"] != "running":
            continue
        try:
            procs = client.api.top(c["Id"])["Processes"] or []
        except Exception:
            continue
        if any(program in " ".join(row) for row in procs):
            return c
    return None


def _slow_tool_workspace(tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "slow").write_text("#!/bin/sh\nexec sleep 4242\n")  # described with --help: it hangs
    (tools / "slow").chmod(0o755)
    pol = tmp_path / "slow.yaml"
    pol.write_text("extends: default\ntools: {describe_timeout: 600}\n")
    return str(pol)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("command", ["call", "session", "session-idle", "tools", "exec"])
def test_a_signal_removes_the_sandbox_and_exits_128_plus_its_number(docker_client, tmp_path, command, sig):
    """Checked by the runner process's own label (no_leaks would also count other runs' orphans)."""
    stdin = subprocess.DEVNULL
    program = "sleep 4242"
    if command == "call":
        args = ["call", "bash", '{"command": "sleep 4242"}', "--workspace", str(tmp_path)]
    elif command == "session":
        args, stdin = ["session", "--workspace", str(tmp_path)], subprocess.PIPE
    elif command == "session-idle":
        args, stdin, program = ["session", "--workspace", str(tmp_path)], subprocess.PIPE, ""
    elif command == "tools":
        args = ["tools", "--workspace", str(tmp_path), "--policy", _slow_tool_workspace(tmp_path)]
    else:
        args = ["exec", "--", "sleep", "4242"]
    proc = subprocess.Popen(runner_cmd(*args), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if command == "session":
            proc.stdin.write(json.dumps({"id": 1, "tool": "bash", "args": {"command": "sleep 4242"}}).encode() + b"\n")
            proc.stdin.flush()
        deadline = time.monotonic() + 120  # a guard against a hung test, not a measurement
        while _running(docker_client, proc.pid, program) is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the sandbox never came up"
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 128 + sig, err.decode()
    assert b"Traceback" not in err, err.decode()
    # runner exec passes the signal on to its command, as `docker run` does (issue 46): the status
    # is the command's, with no line of runner's own; every other command says it was interrupted
    assert (b"interrupted" in err) == (command != "exec"), err.decode()
    assert _containers(docker_client, proc.pid) == []


def test_a_signal_during_close_still_removes_the_sandbox(docker_client, tmp_path, monkeypatch):
    """SIGTERM lands just as the Runner starts closing its sandbox: the close still removes it,
    and the interrupt comes out afterwards."""
    from runner import Runner
    from runner.cli.interrupts import Interrupted, handled
    from runner.controller.sandbox import Sandbox

    real_close = Sandbox.close
    signalled = []

    def close_with_a_signal(self, background=False):
        if not signalled:
            signalled.append(True)
            os.kill(os.getpid(), signal.SIGTERM)  # Interrupted is raised here
        return real_close(self, background=background)

    def session_containers(r):
        return docker_client.api.containers(all=True, filters={"label": f"runner.session={r.session_id}"})

    monkeypatch.setattr(Sandbox, "close", close_with_a_signal)
    try:
        with pytest.raises(Interrupted):
            with handled():
                with Runner(workspace=tmp_path) as r:
                    assert not r.call("ls", {}).is_error
                    assert session_containers(r)
        from runner.controller import finisher

        finisher.wait(timeout=120)  # (the removal runs after close()'s answer)
        assert signalled and session_containers(r) == []
    finally:
        for c in session_containers(r):  # what the unfixed close left
            docker_client.api.remove_container(c["Id"], force=True)
