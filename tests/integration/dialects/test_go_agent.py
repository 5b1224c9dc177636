"""The Go agent SDK's built-in tools (seed 003): names, old_text/new_text, seconds, its
validation error text and its truncation notice."""
from __future__ import annotations

import pytest

from .conftest import Case, dialect_runner, run_case

pytestmark = pytest.mark.usefixtures("no_leaks")

MAIN = 'package main\n\nfunc MyHandler() {\n\tfmt.Println("hello")\n}\n'


def holds(rel: str, text: str):
    def after(ws):
        assert (ws / rel).read_text() == text

    return after


CASES = [
    Case("read", "read", {"path": "pkg/agent/loop.go", "offset": 1, "limit": 2},
         files={"pkg/agent/loop.go": "package agent\n\nfunc Loop() {}\n"},
         content="     1\tpackage agent\n     2\t\n\n[showing lines 1-2 of 3; continue with offset 3]"),
    Case("read-missing", "read", {}, error='validation error: missing required parameter "path"'),
    Case("read-unknown-param", "read", {"path": "x", "file_path": "y"},
         error='validation error: unknown parameter "file_path"'),
    Case("write", "write", {"path": "notes.md", "content": "# Notes\n\n- item one\n"},
         content="wrote 20 bytes to notes.md", after=holds("notes.md", "# Notes\n\n- item one\n")),
    Case("edit", "edit", {"path": "main.go", "old_text": 'fmt.Println("hello")', "new_text": 'fmt.Println("world")'},
         files={"main.go": MAIN}, has=("edited main.go: 1 replacement",),
         after=holds("main.go", MAIN.replace("hello", "world"))),
    Case("edit-not-found", "edit", {"path": "main.go", "old_text": "absent", "new_text": "x"},
         error_has="old_text not found in file main.go"),
    Case("edit-ambiguous", "edit", {"path": "two.go", "old_text": "x", "new_text": "y"}, files={"two.go": "x x\n"},
         error_has="old_text found more than once (ambiguous): 2 times in two.go"),
    Case("edit-file-not-found", "edit", {"path": "nope.go", "old_text": "x", "new_text": "y"},
         error_has="file not found: nope.go"),
    Case("edit-native-names-refused", "edit", {"path": "main.go", "old_string": "a", "new_string": "b"},
         error_has='unknown parameter "old_string"'),
    Case("bash", "bash", {"command": "echo hi 2>&1", "timeout": 60}, content="hi\n"),
    Case("bash-exit-code-appended", "bash", {"command": "echo no; exit 2"}, content="no\nexit code: 2", err=True),
    Case("grep-case-insensitive-by-default", "grep", {"pattern": "FUNC.*handler", "path": ".", "glob": "*.go",
                                                      "context_lines": 0},
         has=("main.go:3:func MyHandler() {",)),
    Case("grep-case-sensitive", "grep", {"pattern": "FUNC", "glob": "*.go", "case_sensitive": True},
         content="no matches found"),
    Case("grep-context", "grep", {"pattern": "func.*Handler", "path": ".", "glob": "*.go", "context_lines": 1},
         has=("main.go-2-", "main.go:3:func MyHandler() {", "main.go-4-")),
    Case("find", "find", {"path": ".", "pattern": "*_test.go", "type": "file"},
         files={"a_test.go": "", "b/c_test.go": "", "d_test.go/e": ""}, content="a_test.go\nb/c_test.go"),
    Case("find-max-results", "find", {"pattern": "*_test.go", "type": "file", "max_results": 1},
         content="a_test.go\n[2 results; showing the first 1: narrow the pattern or raise max_results]"),
    Case("find-dirs", "find", {"pattern": "_test.go", "type": "dir"}, content="d_test.go/"),
    Case("ls", "ls", {"path": "pkg/agent", "show_hidden": False}, files={"pkg/agent/.hidden": ""},
         content="loop.go"),
    Case("ls-hidden", "ls", {"path": "pkg/agent", "show_hidden": True}, content=".hidden\nloop.go"),
    Case("web_search-unconfigured", "web_search", {"query": "golang 1.24 release notes", "max_results": 5},
         error_has="web_search is not configured"),
    Case("web_fetch-max-bytes-bound", "web_fetch", {"url": "http://127.0.0.1/", "max_bytes": 102_401},
         error='validation error: parameter "max_bytes": Input should be less than or equal to 102400'),
]


@pytest.fixture(scope="module")
def runner(ws):
    with dialect_runner("go-agent", ws) as r:
        yield r


@pytest.mark.parametrize("case", CASES, ids=str)
def test_documented_call(runner, ws, case):
    run_case(runner, ws, case)


def test_bash_timeout_is_seconds(runner):
    res = runner.call("bash", {"command": "sleep 5", "timeout": 1.5})
    assert res.is_error and res.meta["timed_out"] is True and res.content.startswith("timed out after 1.5s")


def test_truncation_notice_is_the_sdks(runner):
    res = runner.call("bash", {"command": "seq 1 20000"})
    call_id = res.meta["call_id"]
    assert res.meta["truncated"] is True
    assert (f'\n[Output truncated at 29.3KB. Full output saved to: the result tool, {{"call_id": "{call_id}"}}; '
            "the end of the output follows]\n") in res.content
    assert "cut from the middle" not in res.content
    assert res.content.startswith("1\n2\n") and res.content.endswith("19999\n20000\n")
    assert runner.call("result", {"call_id": call_id, "offset": 12345, "limit": 1}).content.startswith("12345\n")
