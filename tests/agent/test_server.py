"""The agent's JSON-lines loop, spoken to over real pipes: `python3 -m runner.agent`."""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
import zipfile

import pytest

from tests.agent.agentproc import REPO, AgentProc

AGENT_DIR = REPO / "runner" / "agent"


@pytest.fixture
def agent(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    a = AgentProc(ws)
    yield a
    a.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_hello_answers_pid_python_and_tools(agent):
    r = agent.hello_reply
    assert r["op"] == "hello" and r["ok"] is True
    assert r["pid"] == agent.proc.pid
    assert r["python"].count(".") == 2
    assert {"read", "bash", "apply_patch", "git_commit", "memory_get"} <= set(r["tools"])


def test_bad_hello_is_refused_and_a_good_one_still_works(tmp_path):
    a = AgentProc(None)
    try:
        a.send({"op": "hello", "workspace": str(tmp_path / "missing")})
        r = a.next()
        assert r["ok"] is False and "not a directory" in r["error"]
        a.send({"op": "call", "id": "x", "tool": "echo", "args": {"text": "hi"}})
        r = a.next()
        assert r["is_error"] and "hello first" in r["content"]
        a.send({"op": "hello", "workspace": str(tmp_path)})
        assert a.next()["ok"] is True
        assert a.call("echo", {"text": "hi"})["content"] == "hi"
    finally:
        assert a.close() == 0


def test_garbage_lines_and_unknown_ops_get_errors_and_the_loop_goes_on(agent):
    agent.send_raw(b"this is not json\n")
    assert "not JSON" in agent.next()["error"]
    agent.send_raw(b"[1, 2, 3]\n")
    assert "not a JSON object" in agent.next()["error"]
    agent.send_raw(b"\n   \n")  # blank lines are skipped silently
    agent.send_raw(b"\xff\xfe{{{\n")
    assert agent.next()["op"] == "error"
    agent.send({"op": "launch", "id": 7})
    r = agent.next()
    assert r["op"] == "error" and "unknown op" in r["error"] and r["id"] == 7
    agent.send({"op": "ping", "id": "p"})
    assert agent.next() == {"op": "pong", "id": "p"}
    assert agent.call("echo", {"text": "still here"})["content"] == "still here"


def test_bad_calls_are_error_results(agent):
    agent.send({"op": "call", "id": "a"})
    r = agent.next()
    assert r["op"] == "result" and r["id"] == "a" and r["is_error"]
    r = agent.call("no_such_tool", {})
    assert r["is_error"] and r["content"].startswith("unknown tool: no_such_tool")
    agent.send({"op": "call", "id": "b", "tool": "read", "args": [1]})
    r = agent.next()
    assert r["is_error"] and "JSON object" in r["content"]
    # values the controller would have refused: the agent defends itself, never crashes
    for tool, args in [("read", {"path": 5}), ("read", {"path": "x", "offset": "two"}), ("write", {"path": "a"}),
                       ("grep", {"pattern": "a", "context": "lots"}), ("ls", {"depth": 99}),
                       ("bash", {"command": "true", "timeout": "soon"}), ("process", {"action": "poll"}),
                       ("http_fetch", {"url": None}), ("edit", {"path": "a", "edits": "nope"}),
                       ("apply_patch", {"patch": 42}), ("memory_get", {"path": "MEMORY.md", "from": "x"})]:
        r = agent.call(tool, args)
        assert r["is_error"], (tool, args, r)
    assert agent.call("echo", {"text": "ok"})["content"] == "ok"


def test_an_exception_inside_a_tool_becomes_an_internal_error_result(agent):
    r = agent.call("grep", {"pattern": "a", "context": "lots"})
    assert r["is_error"] and r["content"].startswith("internal error in grep: ValueError")
    assert r["meta"]["error_type"] == "internal"


def test_streamed_output_arrives_before_the_result_in_order(agent):
    r = agent.call("bash", {"command": "for i in 1 2 3; do echo $i; sleep 0.05; done; echo err >&2; exit 4"})
    assert r["output"] == "1\n2\n3\nerr\n"
    assert r["content"] == "exit code: 4" and r["is_error"]
    assert r["meta"] == {"streamed": True, "exit_code": 4, "timed_out": False}


def test_multibyte_characters_split_across_reads_survive(agent):
    cmd = "printf '\\303'; sleep 0.2; printf '\\251 \\342\\202'; sleep 0.2; printf '\\254\\n'"
    r = agent.call("bash", {"command": cmd})
    assert r["output"] == "é €\n"


def test_a_100mb_flood_streams_through_with_bounded_agent_memory(agent):
    total = 0
    peak = 0
    n = 0
    start_rss = _rss_kib(agent.proc.pid)

    def sink(data: str) -> None:
        nonlocal total, peak, n
        total += len(data)
        n += 1
        if n % 50 == 0:
            peak = max(peak, _rss_kib(agent.proc.pid))

    r = agent.call("bash", {"command": "head -c 100000000 /dev/zero | tr '\\0' 'a'", "timeout": 300}, on_output=sink)
    assert r["is_error"] is False and r["content"] == ""
    assert total == 100_000_000
    assert peak > 0
    assert peak - start_rss < 40 * 1024, f"agent RSS grew from {start_rss} KiB to {peak} KiB"


def test_timeout_kills_children_grandchildren_and_escaped_sessions(agent, tmp_path):
    ws = tmp_path / "ws"
    cmd = ("sleep 100 & echo $! > child.pid; "
           "sh -c 'sleep 100 & echo $! > grandchild.pid; wait' & "
           "setsid sleep 100 & echo $! > escaped.pid; "
           "sleep 100")
    t0 = time.monotonic()
    r = agent.call("bash", {"command": cmd, "timeout": 1})
    took = time.monotonic() - t0
    assert r["content"] == "timed out after 1s" and r["is_error"]
    assert r["meta"] == {"streamed": True, "exit_code": 124, "timed_out": True}
    assert took < 6
    for name in ("child.pid", "grandchild.pid", "escaped.pid"):
        pid = int((ws / name).read_text())
        for _ in range(40):
            if not _alive(pid):
                break
            time.sleep(0.05)
        assert not _alive(pid), f"{name} {pid} survived the timeout"


def test_term_ignoring_process_is_killed_after_the_grace(agent):
    t0 = time.monotonic()
    r = agent.call("bash", {"command": "trap '' TERM; sleep 100", "timeout": 0.5})
    assert r["meta"]["timed_out"] and time.monotonic() - t0 < 5


def test_a_command_that_leaves_a_background_child_returns_promptly(agent):
    t0 = time.monotonic()
    r = agent.call("bash", {"command": "sleep 30 & echo started"})
    assert r["output"] == "started\n" and not r["is_error"]
    assert time.monotonic() - t0 < 5


def test_shutdown_kills_background_jobs_and_exits_0(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    a = AgentProc(ws)
    r = a.call("exec", {"command": "sleep 100", "background": True})
    pid = r["meta"]["pid"]
    assert _alive(pid)
    assert a.close() == 0
    for _ in range(40):
        if not _alive(pid):
            break
        time.sleep(0.05)
    assert not _alive(pid)


def test_eof_on_stdin_exits_0_and_kills_jobs(tmp_path):
    a = AgentProc(tmp_path)
    pid = a.call("exec", {"command": "sleep 100", "background": True})["meta"]["pid"]
    a.proc.stdin.close()
    assert a.proc.wait(timeout=10) == 0
    time.sleep(0.2)
    assert not _alive(pid)
    a.stderr.close()


def test_sigterm_exits_and_kills_jobs(tmp_path):
    a = AgentProc(tmp_path)
    pid = a.call("exec", {"command": "sleep 100", "background": True})["meta"]["pid"]
    a.proc.send_signal(signal.SIGTERM)
    assert a.proc.wait(timeout=10) == 0
    time.sleep(0.2)
    assert not _alive(pid)
    a.stderr.close()


def test_nothing_but_protocol_lines_reach_stdout(agent):
    # a child that writes to every inherited descriptor it can find
    r = agent.call("bash", {"command": "echo to-stdout; echo to-stderr >&2; for fd in 3 4 5 6 7 8 9; do "
                                       "(echo leak >&$fd) 2>/dev/null; done; true"})
    assert r["output"] == "to-stdout\nto-stderr\n"
    assert agent.call("echo", {"text": "x"})["content"] == "x"  # every stdout line parsed as JSON so far


def test_calls_are_answered_in_order(agent):
    for n in range(20):
        agent.send({"op": "call", "id": f"q{n}", "tool": "echo", "args": {"text": str(n)}})
    got = [agent.next() for _ in range(20)]
    assert [m["id"] for m in got] == [f"q{n}" for n in range(20)]
    assert [m["content"] for m in got] == [str(n) for n in range(20)]


# -- shipping: the package works under another name, stdlib only, on Python 3.9 ------------
def test_agent_runs_as_runner_agent_from_a_zip(tmp_path):
    z = tmp_path / "agent.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for f in AGENT_DIR.glob("*.py"):
            zf.write(f, f"runner_agent/{f.name}")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("zipped\n")
    env = {**os.environ, "PYTHONPATH": str(z)}
    proc = subprocess.run([sys.executable, "-u", "-m", "runner_agent"], cwd=str(tmp_path), env=env, timeout=30,
                          input=(json.dumps({"op": "hello", "workspace": str(ws)}) + "\n" +
                                 json.dumps({"op": "call", "id": "1", "tool": "read", "args": {"path": "a.txt"}}) +
                                 "\n" + json.dumps({"op": "call", "id": "2", "tool": "git_status", "args": {}}) +
                                 "\n").encode(), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    lines = [json.loads(x) for x in proc.stdout.decode().splitlines()]
    assert lines[0]["ok"] is True
    assert lines[1]["content"] == "     1\tzipped"
    assert lines[2]["op"] == "result"


def _modules():
    return sorted(AGENT_DIR.glob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_agent_module_is_stdlib_only_relative_and_python39(path):
    src = path.read_text()
    tree = ast.parse(src, feature_version=(3, 9))
    if path.name not in ("__main__.py", "__init__.py"):
        assert "from __future__ import annotations" in src, "annotations must stay unevaluated on 3.9"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                assert top in sys.stdlib_module_names, f"{path.name} imports {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            top = (node.module or "").split(".")[0]
            assert top in sys.stdlib_module_names, f"{path.name} imports from {node.module}"


def test_threads_are_not_left_running_by_foreground_calls(agent):
    for _ in range(5):
        agent.call("exec", {"command": "cat", "input": "x" * 100000})
    with open(f"/proc/{agent.proc.pid}/status") as f:
        threads = int(next(line for line in f if line.startswith("Threads:")).split()[1])
    assert threads <= 2, threads




def test_controller_gone_mid_stream_kills_the_command(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "runner.agent"], cwd=str(REPO), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    call = {"op": "call", "id": "f", "tool": "bash",
            "args": {"command": "echo $$ > leader.pid; head -c 3000000 /dev/zero; sleep 100"}}
    proc.stdin.write((json.dumps({"op": "hello", "workspace": str(tmp_path)}) + "\n" + json.dumps(call) + "\n").encode())
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["ok"] is True
    assert json.loads(proc.stdout.readline())["op"] == "output"
    proc.stdout.close()  # nobody reads any more: the agent's next write fails
    assert proc.wait(timeout=20) == 0
    pid = int((tmp_path / "leader.pid").read_text())
    for _ in range(40):
        if not _alive(pid):
            break
        time.sleep(0.05)
    assert not _alive(pid)
