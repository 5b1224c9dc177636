"""miclaw's tools (seed 004): 0-based read offsets, old_text/new_text, apply_patch, exec in
seconds with process_id for background jobs, memory tools with its defaults."""
from __future__ import annotations

import re

import pytest

from .conftest import Case, dialect_runner, run_case

pytestmark = pytest.mark.usefixtures("no_leaks")

LONG = "".join(f"line {i}\n" for i in range(1, 2501))
PATCH = """*** Begin Patch
*** Add File: path/to/new.go
+package main
*** Update File: path/to/existing.go
@@ package main @@
 unchanged
-old line
+new line
*** Delete File: path/to/remove.go
*** End Patch
"""


def holds(rel: str, text: str | None):
    def after(ws):
        if text is None:
            assert not (ws / rel).exists()
        else:
            assert (ws / rel).read_text() == text

    return after


CASES = [
    Case("read-offset-0-is-line-1", "read", {"path": "f.txt", "offset": 0, "limit": 1}, files={"f.txt": "a\nb\nc\n"},
         content="     1\ta\n\n[showing lines 1-1 of 3; continue with offset 1]"),
    Case("read-offset-1-is-line-2", "read", {"path": "f.txt", "offset": 1, "limit": 1},
         content="     2\tb\n\n[showing lines 2-2 of 3; continue with offset 2]"),
    Case("read-negative-offset", "read", {"path": "f.txt", "offset": -1},
         error="invalid arguments for read: offset: Input should be greater than or equal to 0"),
    Case("write", "write", {"path": "w/x.txt", "content": "abc"}, content="wrote 3 bytes to w/x.txt"),
    Case("edit", "edit", {"path": "w/x.txt", "old_text": "b", "new_text": "B"}, has=("1 replacement",),
         after=holds("w/x.txt", "aBc")),
    Case("apply_patch", "apply_patch", {"patch": PATCH},
         files={"path/to/existing.go": "package main\nunchanged\nold line\n", "path/to/remove.go": "x"},
         after=lambda ws: (holds("path/to/new.go", "package main\n")(ws),
                           holds("path/to/existing.go", "package main\nunchanged\nnew line\n")(ws),
                           holds("path/to/remove.go", None)(ws))),
    Case("grep-include", "grep", {"pattern": "new line", "path": "path", "include": "*.go"},
         content="path/to/existing.go:3:new line"),
    Case("glob", "glob", {"pattern": "**/*.go"}, content="path/to/existing.go\npath/to/new.go"),
    Case("ls-path-required", "ls", {}, error="invalid arguments for ls: path: required"),
    Case("ls", "ls", {"path": "path/to"}, content="existing.go\nnew.go"),
    Case("exec", "exec", {"command": "echo hi; pwd", "workdir": "path"}, content="hi\n/workspace/path\n"),
    Case("exec-env-not-offered", "exec", {"command": "env", "env": {"A": "1"}},
         error="exec: argument env is not offered by runner: runner's exec takes no environment: set variables "
               "in the command (K=V cmd)"),
    Case("process-kill-not-miclaw", "process", {"action": "kill", "process_id": "1"},
         error_has="invalid arguments for process: action: Input should be 'status', 'input', 'signal' or 'poll'"),
    Case("process-id-not-a-number", "process", {"action": "status", "process_id": "abc"},
         error="'abc' is not a process id (a number)"),
    Case("memory_search", "memory_search", {"query": "deploy"},
         files={"MEMORY.md": "# Memory\n\nWe deploy on fridays.\n\nUnrelated words here.\n"},
         match=r"MEMORY\.md:3-3 \(score \d+\.\d\d\)\nWe deploy on fridays\."),
    Case("memory_get", "memory_get", {"path": "MEMORY.md", "from": 3, "lines": 1}, content="We deploy on fridays."),
    Case("cron-not-offered", "cron", {"action": "list"}, error_has="cron is not offered by runner's miclaw dialect"),
    Case("sessions_spawn-not-offered", "sessions_spawn", {"prompt": "x"},
         error_has="sessions_spawn is not offered by runner's miclaw dialect"),
]


@pytest.fixture(scope="module")
def runner(ws):
    with dialect_runner("miclaw", ws) as r:
        yield r


@pytest.mark.parametrize("case", CASES, ids=str)
def test_documented_call(runner, ws, case):
    run_case(runner, ws, case)


def test_read_pages_continue_with_a_0_based_offset(runner, ws):
    (ws / "long.txt").write_text(LONG)
    first = runner.call("read", {"path": "long.txt"})
    assert first.content.endswith("[showing lines 1-2000 of 2500; continue with offset 2000]")
    nxt = runner.call("read", {"path": "long.txt", "offset": 2000, "limit": 1})
    assert nxt.content.startswith("  2001\tline 2001\n")


def test_exec_background_and_process_by_process_id(runner):
    started = runner.call("exec", {"command": "echo ready; read x; echo got $x", "background": True})
    assert not started.is_error, started.content
    pid = re.search(r"pid (\d+)", started.content).group(1)
    sent = runner.call("process", {"action": "input", "process_id": pid, "input": "ping\n"})
    assert not sent.is_error and sent.content == f"sent 5 characters to pid {pid}"
    for _ in range(200):  # until the job has ended: what is being waited for, not a time
        status = runner.call("process", {"action": "status", "process_id": pid})
        if "exited" in status.content:
            break
    assert status.content.startswith(f"pid {pid}: exited with code 0")
    polled = runner.call("process", {"action": "poll", "process_id": pid})
    assert polled.content == f"pid {pid}: exited with code 0\nready\ngot ping\n"
