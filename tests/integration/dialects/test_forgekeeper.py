"""Forgekeeper's Tool Reference (seed 002), call by call, against the docker executor."""
from __future__ import annotations

import json

import pytest

from .conftest import Case, dialect_runner, run_case

pytestmark = pytest.mark.usefixtures("no_leaks")

NOTES = "".join(f"{i:07d}\n" for i in range(256))  # 2048 bytes


def unchanged(rel: str, text: str):
    def after(ws):
        assert (ws / rel).read_text() == text

    return after


CASES = [
    # Utility
    Case("echo", "echo", {"text": "Hello, World!"}, content="Hello, World!"),
    Case("echo-missing", "echo", {}, error="Missing required argument: text"),
    Case("echo-too-long", "echo", {"text": "x" * 10_001}, error="Argument 'text' exceeds maximum length"),
    Case("get_time", "get_time", {}, match=r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"),
    # read_file: the object, maxBytes, the errors
    Case("read_file-maxBytes", "read_file", {"file": "notes.txt", "maxBytes": 1024}, files={"notes.txt": NOTES},
         json={"path": "notes.txt", "bytes": 2048, "readBytes": 1024, "truncated": True, "encoding": "utf8",
               "content": NOTES[:1024]}),
    Case("read_file-whole", "read_file", {"file": "small.txt"}, files={"small.txt": "a\r\nb"},
         json={"path": "small.txt", "bytes": 4, "readBytes": 4, "truncated": False, "encoding": "utf8",
               "content": "a\r\nb"}),
    Case("read_file-maxBytes-string", "read_file", {"file": "notes.txt", "maxBytes": "8"},
         json={"path": "notes.txt", "bytes": 2048, "readBytes": 8, "truncated": True, "encoding": "utf8",
               "content": NOTES[:8]}),
    Case("read_file-missing-arg", "read_file", {}, error="file is required"),
    Case("read_file-enoent", "read_file", {"file": "nope.txt"}, error="ENOENT: no such file or directory, open 'nope.txt'"),
    Case("read_file-traversal", "read_file", {"file": "../../etc/passwd"}, error="Path traversal detected"),
    Case("read_file-encoding", "read_file", {"file": "notes.txt", "encoding": "latin1"},
         error="Argument 'encoding' must be one of: 'utf8' or 'utf-8'"),
    Case("read_file-native-name-refused", "read_file", {"path": "notes.txt"},
         error="file is required; Unknown argument 'path'"),
    # read_dir
    Case("read_dir", "read_dir", {"path": "data"}, files={"data/users.json": "[]", "data/logs/x.log": ""},
         json={"path": "data", "entries": [{"name": "logs", "isFile": False, "isDirectory": True},
                                           {"name": "users.json", "isFile": True, "isDirectory": False}]}),
    Case("read_dir-enoent", "read_dir", {"path": "nodir"}, error="ENOENT: no such file or directory, scandir 'nodir'"),
    Case("read_dir-traversal", "read_dir", {"path": "/etc"}, error="Path traversal detected"),
    # write_file: overwrite refuses to replace unless true
    Case("write_file-overwrite", "write_file", {"file": "output.txt", "content": "Hello, World!", "overwrite": True},
         json={"ok": True, "path": "output.txt", "bytes": 13}, after=unchanged("output.txt", "Hello, World!")),
    Case("write_file-exists", "write_file", {"file": "output.txt", "content": "other"},
         error="file exists (set overwrite=true to replace)", after=unchanged("output.txt", "Hello, World!")),
    Case("write_file-exists-false", "write_file", {"file": "output.txt", "content": "other", "overwrite": False},
         error="file exists (set overwrite=true to replace)", after=unchanged("output.txt", "Hello, World!")),
    Case("write_file-new", "write_file", {"file": "deep/new.txt", "content": "é"},
         json={"ok": True, "path": "deep/new.txt", "bytes": 2}, after=unchanged("deep/new.txt", "é")),
    Case("write_file-missing", "write_file", {"file": "x.txt"}, error="file and content are required"),
    Case("write_file-too-large", "write_file", {"file": "big.txt", "content": "x" * 5000},
         error="content too large (> 4096 bytes)"),
    Case("write_file-traversal", "write_file", {"file": "../escape.txt", "content": "x"}, error="Path traversal detected"),
    # http_fetch: the URL check (the sandbox has no network here)
    Case("http_fetch-bad-url", "http_fetch", {"url": "ftp://example.invalid/x"},
         error="url must be an absolute http(s) URL"),
    Case("http_fetch-missing", "http_fetch", {}, error="url is required"),
    # run_bash: {shell, stdout, stderr}, timeout_ms, Forgekeeper's error text
    Case("run_bash", "run_bash", {"script": "ls -la | grep .md", "timeout_ms": 5000}, files={"README.md": "r"},
         has=('"shell": "/bin/bash"', "README.md", '"stderr": ""')),
    Case("run_bash-shape", "run_bash", {"script": "echo hi"}, json={"shell": "/bin/bash", "stdout": "hi\n", "stderr": ""}),
    Case("run_bash-streams-apart", "run_bash", {"script": "echo hi; echo oops >&2"},
         json={"shell": "/bin/bash", "stdout": "hi\n", "stderr": "oops\n"}),
    Case("run_bash-no-output", "run_bash", {"script": "true"}, json={"shell": "/bin/bash", "stdout": "", "stderr": ""}),
    Case("run_bash-exit-stderr", "run_bash", {"script": "echo partial; echo why >&2; exit 3"},
         error="bash error (exit 3): why"),
    Case("run_bash-exit", "run_bash", {"script": "nosuchcommand"},
         match=r"bash error \(exit 127\): .*nosuchcommand: command not found", err=True),
    Case("run_bash-missing", "run_bash", {}, error="script is required"),
    Case("run_bash-cwd", "run_bash", {"script": "pwd", "cwd": "data"},
         json={"shell": "/bin/bash", "stdout": "/workspace/data\n", "stderr": ""}),
    # the tools runner has no body for
    Case("run_powershell", "run_powershell", {"script": "Get-ChildItem"},
         error_has="run_powershell is not offered by runner's forgekeeper dialect"),
    Case("write_repo_file", "write_repo_file", {"path": "a", "content": "b"},
         error_has="write_repo_file is not offered by runner's forgekeeper dialect"),
    Case("unknown", "read", {"path": "notes.txt"}, error_has="unknown tool: read. Tools that exist here (forgekeeper"),
]


@pytest.fixture(scope="module")
def runner(ws):
    with dialect_runner("forgekeeper", ws, overrides={"limits.max_write": "4k"}) as r:
        yield r


@pytest.mark.parametrize("case", CASES, ids=str)
def test_documented_call(runner, ws, case):
    run_case(runner, ws, case)


def test_run_bash_timeout_ms_is_milliseconds(runner):
    """timeout_ms 1500 kills a sleep 5: the command is killed and the native timeout is 1.5 s."""
    res = runner.call("run_bash", {"script": "sleep 5", "timeout_ms": 1500})
    assert res.is_error and res.meta["timed_out"] is True and res.meta["exit_code"] == 124
    assert "timed out after 1.5s" in res.content


def test_run_bash_cuts_each_stream_by_the_policys_caps(runner):
    """stdout and stderr are each cut head and tail by limits.output (30,000 characters / 256
    lines); the whole stderr is kept for the result tool under <call_id>.stderr."""
    res = runner.call("run_bash", {"script": "seq 1 1000; seq 5001 6000 >&2"}, call_id="fk-split")
    got = json.loads(res.content)
    for key, first, last in (("stdout", "1\n", "1000\n"), ("stderr", "5001\n", "6000\n")):
        text = got[key]
        assert text.startswith(first) and text.endswith(last) and "cut from the middle of 1000 lines" in text, key
    assert "5001" not in got["stdout"] and "1000\n" not in got["stderr"]
    assert res.meta["stderr_truncated"] is True and res.meta["stderr_chars"] == len("".join(
        f"{i}\n" for i in range(5001, 6001)))
    page = runner.call("result", {"call_id": "fk-split.stderr", "offset": 500, "limit": 2})
    assert page.content.startswith("5500\n5501")


def test_native_bash_keeps_one_interleaved_stream(ws):
    """runner's own bash (no dialect) keeps TOOLS.md's interleaved output."""
    from runner import Runner

    with Runner(executor="docker", workspace=ws, preset="all") as r:
        res = r.call("bash", {"command": "echo hi; echo oops >&2"})
        assert res.content == "hi\noops\n" and "stderr" not in res.meta
        apart = r.call("bash", {"command": "echo hi; echo oops >&2", "separate_stderr": True})
        assert apart.content == "hi\n" and apart.meta["stderr"] == "oops\n"


def test_git_tools_answer_objects(runner, ws):
    setup = runner.call("run_bash", {"script": "git init -q -b main . && echo a > a.txt"})
    assert not setup.is_error, setup.content
    status = json.loads(runner.call("git_status", {}).content)
    assert status["cwd"] == "/workspace" and status["stderr"] is None and "?? a.txt" in status["status"]
    assert json.loads(runner.call("git_add", {"files": ["a.txt"]}).content) == {"ok": True, "files": ["a.txt"],
                                                                                 "stderr": None}
    diff = json.loads(runner.call("git_diff", {"staged": True}).content)
    assert diff["cwd"] == "/workspace" and "+a" in diff["diff"]
    done = json.loads(runner.call("git_commit", {"message": "feat: first"}).content)
    assert done == {"ok": True, "message": "feat: first", "stderr": None}
    assert json.loads(runner.call("git_diff", {}).content)["diff"] == ""
    assert runner.call("git_add", {"files": ["f"] * 101}).content == "Argument 'files' exceeds maximum of 100 items"
    assert runner.call("git_add", {}).content == "files is required and must be an array"
    assert runner.call("git_add", {"files": "a.txt"}).content == "files is required and must be an array"
    assert runner.call("git_commit", {}).content == "message is required"
    refused = runner.call("git_status", {"repo_path": "."})
    assert refused.is_error and refused.content.startswith("git_status: argument repo_path is not offered by runner")


def test_git_stderr_is_kept_apart(runner, ws):
    """What git writes to stderr (a push's `To …` lines) is the answer's stderr, where
    Forgekeeper's git tools put it; null when git wrote nothing there."""
    setup = runner.call("run_bash", {"script": "rm -rf .git remote.git && git init -q --bare remote.git && "
                                               "git init -q -b main . && git remote add origin ./remote.git && "
                                               "echo b > b.txt"})
    assert not setup.is_error, setup.content
    assert json.loads(runner.call("git_add", {"files": ["b.txt"]}).content)["stderr"] is None
    assert json.loads(runner.call("git_commit", {"message": "b"}).content)["stderr"] is None
    pushed = runner.call("git_push", {"remote": "origin", "branch": "main"})
    got = json.loads(pushed.content)
    assert got["ok"] is True and got["branch"] == "main" and "main -> main" in got["stderr"], got
    assert not runner.call("run_bash", {"script": "git branch -q -u origin/main main"}).is_error
    unnamed = json.loads(runner.call("git_push", {}).content)  # the current branch, Forgekeeper's default
    assert unnamed["branch"] == "main" and unnamed["remote"] == "origin", unnamed


def test_refresh_tools_counts_the_dialects_tools(runner):
    got = json.loads(runner.call("refresh_tools", {}).content)
    assert got["ok"] is True and got["count"] == len(got["tools"])
    assert {"read_file", "write_file", "run_bash", "git_status"} <= set(got["tools"])
    assert "read" not in got["tools"] and "run_powershell" not in got["tools"]
