"""ah's tools (seed 000): read, write, edit, bash with its timeout in milliseconds."""
from __future__ import annotations

import pytest

from .conftest import Case, dialect_runner, run_case

pytestmark = pytest.mark.usefixtures("no_leaks")


def holds(rel: str, text: str):
    def after(ws):
        assert (ws / rel).read_text() == text

    return after


CASES = [
    Case("write-creates-parents", "write", {"path": "a/b.txt", "content": "one\ntwo\ntwo\n"},
         content="wrote 12 bytes to a/b.txt", after=holds("a/b.txt", "one\ntwo\ntwo\n")),
    Case("read", "read", {"path": "a/b.txt"}, content="     1\tone\n     2\ttwo\n     3\ttwo"),
    Case("read-offset-limit", "read", {"path": "a/b.txt", "offset": 2, "limit": 1},
         content="     2\ttwo\n\n[showing lines 2-2 of 3; continue with offset 3]"),
    Case("read-binary-refused", "read", {"path": "bin.dat"}, files={"bin.dat": "a\x00b"}, error_has="is a binary file"),
    Case("read-missing-path", "read", {}, error="invalid arguments for read: path: required"),
    Case("edit-unique", "edit", {"path": "a/b.txt", "old_string": "one", "new_string": "ONE"},
         has=("edited a/b.txt: 1 replacement",), after=holds("a/b.txt", "ONE\ntwo\ntwo\n")),
    Case("edit-not-unique", "edit", {"path": "a/b.txt", "old_string": "two", "new_string": "2"},
         error_has="old_string found 2 times", after=holds("a/b.txt", "ONE\ntwo\ntwo\n")),
    Case("edit-no-replace_all-in-ah", "edit", {"path": "a/b.txt", "old_string": "two", "new_string": "2",
                                               "replace_all": True},
         error="invalid arguments for edit: replace_all: unexpected argument (not in this tool's schema)"),
    Case("bash-combined", "bash", {"command": "echo out; echo err >&2"}, content="out\nerr\n"),
    Case("bash-exit", "bash", {"command": "echo x; exit 3"}, content="x\nexit code: 3", err=True),
    Case("bash-timeout-not-seconds", "bash", {"command": "echo fast", "timeout": 200}, content="fast\n"),
    Case("not-ah", "ls", {}, error_has="unknown tool: ls. Tools that exist here (ah dialect): read, write, edit, bash"),
]


@pytest.fixture(scope="module")
def runner(ws):
    with dialect_runner("ah", ws) as r:
        yield r


@pytest.mark.parametrize("case", CASES, ids=str)
def test_documented_call(runner, ws, case):
    run_case(runner, ws, case)


def test_bash_timeout_is_milliseconds(runner):
    """timeout 1500 (ms) kills a sleep 5: killed, and the native timeout was 1.5 s."""
    res = runner.call("bash", {"command": "sleep 5", "timeout": 1500})
    assert res.is_error and res.meta["timed_out"] is True and res.meta["exit_code"] == 124
    assert res.content.startswith("timed out after 1.5s")


def test_long_output_keeps_head_and_tail_at_ahs_limits(runner):
    """ah's bash limits (30,000 characters, 256 lines, head and tail) are runner's defaults."""
    res = runner.call("bash", {"command": "seq 1 1000"})
    lines = res.content.split("\n")
    assert res.meta["truncated"] is True and lines[0] == "1" and res.content.rstrip("\n").endswith("1000")
    assert "cut from the middle" in res.content
    kept = runner.call("result", {"call_id": res.meta["call_id"], "offset": 500, "limit": 1})
    assert kept.content.startswith("500\n")
