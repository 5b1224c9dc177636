"""One table of tool behaviours (TOOLS.md and issue 3, item 6), run through the `call` fixture.

Every case states its files, its calls and what each answer must say; nothing here depends on
how the agent is reached, so the same table runs locally and in Docker. Files are created in
the `workspace` fixture directly, and checked there afterwards.
"""
from __future__ import annotations

import base64
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


@dataclass
class Step:
    tool: str
    args: dict
    error: Optional[bool] = False  # expected is_error; None: either
    has: tuple = ()  # substrings of .text
    lacks: tuple = ()
    match: Optional[str] = None  # regular expression searched in .text
    equals: Optional[str] = None
    meta: dict = field(default_factory=dict)  # expected subset of .meta
    save: dict = field(default_factory=dict)  # {var: meta key} for later steps' "{var}"
    before: float = 0.0  # seconds to sleep before this step
    check: Any = None  # callable(answer) for what the fields above cannot say


@dataclass
class Case:
    id: str
    steps: list
    files: dict = field(default_factory=dict)  # path -> str | bytes
    modes: dict = field(default_factory=dict)  # path -> mode set before the calls
    sh: Optional[str] = None  # shell set-up run in the workspace on the test's side
    after: dict = field(default_factory=dict)  # path -> expected str | bytes | None (absent)
    after_modes: dict = field(default_factory=dict)
    net: Optional[str] = None  # None | "server" (allowlisted local server) | "off" (mode none, tripwire)
    routes: dict = field(default_factory=dict)  # for net="server": path -> (status, headers, body)
    settle: float = 0.0  # seconds to wait before checking `after`


def S(tool: str, args: dict, **kw) -> Step:
    return Step(tool, args, **kw)


LINES_10 = "".join(f"line {n}\n" for n in range(1, 11))
HTML = b"<html><head><title>Hello page</title><script>var x=1;</script></head><body><h1>Welcome</h1>" \
       b"<p>Some <b>bold</b> text.</p><ul><li>one</li><li>two</li></ul></body></html>"


def _blocks(content) -> list:
    return [b if isinstance(b, dict) else b.model_dump() for b in content]


def _is_png(ans) -> None:
    blocks = _blocks(ans.content)
    img = [b for b in blocks if b["type"] == "image"]
    assert len(img) == 1 and img[0]["media_type"] == "image/png"
    assert base64.b64decode(img[0]["data"]) == PNG


CASES = [
    # -- read -------------------------------------------------------------------------------
    Case("read numbers lines like cat -n", [S("read", {"path": "a.txt"}, equals="     1\talpha\n     2\tbeta")],
         files={"a.txt": "alpha\nbeta\n"}),
    Case("read accepts file_path, @ and a string offset",
         [S("read", {"file_path": "@a.txt", "offset": "2", "limit": "1"}, has=("     2\tline 2",),
            lacks=("line 1\n", "line 3\n"), meta={"next_offset": 3})], files={"a.txt": LINES_10}),
    Case("read pages end with the offset that continues",
         [S("read", {"path": "a.txt", "offset": 3, "limit": 2},
            has=("     3\tline 3\n     4\tline 4", "lines 3-4 of 10", "offset=5"))], files={"a.txt": LINES_10}),
    Case("read stops a page at 2000 lines",
         [S("read", {"path": "big.txt"}, has=("  2000\tx2000", "lines 1-2000 of 2500", "offset=2001"),
            lacks=("x2001",))], files={"big.txt": "".join(f"x{n}\n" for n in range(1, 2501))}),
    Case("read stops a page at 50 KiB",
         [S("read", {"path": "wide.txt"}, has=("50 KiB", "continue with offset="),
            check=lambda a: len(a.text.encode()) < 52 * 1024)],
         files={"wide.txt": "".join(("%04d" % n) + "y" * 200 + "\n" for n in range(1000))}),
    Case("read past the end says how many lines there are",
         [S("read", {"path": "a.txt", "offset": 50}, error=True, has=("past the end", "10 lines"))],
         files={"a.txt": LINES_10}),
    Case("read of one over-long line says how to read it with bash",
         [S("read", {"path": "long.txt"}, error=True, has=("longer than one page", "bash", "sed -n '1p'"))],
         files={"long.txt": "z" * 60_000 + "\n"}),
    Case("read refuses a binary file with its size",
         [S("read", {"path": "bin.dat"}, error=True, has=("binary", "1000 bytes"))],
         files={"bin.dat": b"\x00\x01\x02\x03" * 250}),
    Case("read returns an image block for a png", [S("read", {"path": "dot.png"}, check=_is_png)],
         files={"dot.png": PNG}),
    Case("read of a directory says to use ls", [S("read", {"path": "sub"}, error=True, has=("directory", "ls"))],
         files={"sub/x.txt": "x"}),
    Case("read of a missing file", [S("read", {"path": "nope.txt"}, error=True, has=("not found", "nope.txt"))]),
    Case("read outside the workspace is refused",
         [S("read", {"path": "../outside.txt"}, error=True, has=("outside the workspace",))]),
    Case("read shows invalid UTF-8 as U+FFFD", [S("read", {"path": "bad.txt"}, has=("caf\ufffd au lait",))],
         files={"bad.txt": b"caf\xe9 au lait\nplain text line\n"}),
    Case("read of an empty file", [S("read", {"path": "e.txt"}, equals="(empty file)")], files={"e.txt": ""}),

    # -- write ------------------------------------------------------------------------------
    Case("write creates parents and says how much it wrote",
         [S("write", {"path": "d/e/f.txt", "content": "hello"}, equals="wrote 5 bytes to d/e/f.txt")],
         after={"d/e/f.txt": "hello"}),
    Case("write replaces a file and keeps its mode",
         [S("write", {"path": "run.sh", "content": "echo new\n"}, has=("wrote 9 bytes",))],
         files={"run.sh": "echo old\n"}, modes={"run.sh": 0o755}, after={"run.sh": "echo new\n"},
         after_modes={"run.sh": 0o755}),
    Case("write into a protected directory is refused",
         [S("write", {"path": ".git/hooks/pre-commit", "content": "x"}, error=True,
            equals="path is in a protected directory: .git/hooks/pre-commit")],
         files={".git/hooks/README": "hooks"}, after={".git/hooks/pre-commit": None}),
    Case("write without content names the argument",
         [S("write", {"path": "a.txt"}, error=True, has=("invalid arguments for write: content",))]),

    # -- edit -------------------------------------------------------------------------------
    Case("edit replaces a unique match and shows a diff",
         [S("edit", {"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"},
            has=("1 replacement", "-x = 1", "+x = 2"))],
         files={"a.py": "x = 1\ny = 2\n"}, after={"a.py": "x = 2\ny = 2\n"}),
    Case("edit accepts old_text/newText aliases",
         [S("edit", {"path": "a.txt", "old_text": "beta", "newText": "gamma"})],
         files={"a.txt": "alpha\nbeta\n"}, after={"a.txt": "alpha\ngamma\n"}),
    Case("edit keeps CRLF line endings",
         [S("edit", {"path": "w.txt", "old_string": "one\ntwo", "new_string": "uno\ndos"})],
         files={"w.txt": b"one\r\ntwo\r\nthree\r\n"}, after={"w.txt": b"uno\r\ndos\r\nthree\r\n"}),
    Case("edit keeps a BOM",
         [S("edit", {"path": "b.txt", "old_string": "hello", "new_string": "bye"})],
         files={"b.txt": b"\xef\xbb\xbfhello world\n"}, after={"b.txt": b"\xef\xbb\xbfbye world\n"}),
    Case("edit of an ambiguous match says how often and how to fix it",
         [S("edit", {"path": "a.txt", "old_string": "dup", "new_string": "x"}, error=True,
            has=("found 2 times", "lines 1, 3", "replace_all"))],
         files={"a.txt": "dup\nmid\ndup\n"}, after={"a.txt": "dup\nmid\ndup\n"}),
    Case("edit with replace_all replaces every match",
         [S("edit", {"path": "a.txt", "old_string": "dup", "new_string": "x", "replace_all": True},
            has=("2 replacements",))],
         files={"a.txt": "dup\nmid\ndup\n"}, after={"a.txt": "x\nmid\nx\n"}),
    Case("edit of missing text says not found and points at the nearest line",
         [S("edit", {"path": "a.txt", "old_string": "def helper(x):", "new_string": "y"}, error=True,
            has=("not found", "most similar line is 2"))],
         files={"a.txt": "import os\ndef helper(y):\n    pass\n"}),
    Case("edit: several edits apply together",
         [S("edit", {"path": "a.txt", "edits": [{"old_string": "a", "new_string": "A"},
                                                  {"old_text": "c", "new_text": "C"}]}, has=("2 replacements",))],
         files={"a.txt": "a\nb\nc\n"}, after={"a.txt": "A\nb\nC\n"}),
    Case("edit: several edits are all or nothing",
         [S("edit", {"path": "a.txt", "edits": [{"old_string": "a", "new_string": "A"},
                                                  {"old_string": "zzz", "new_string": "Z"}]}, error=True,
            has=("edit 2 of 2", "not found", "No edit was applied"))],
         files={"a.txt": "a\nb\nc\n"}, after={"a.txt": "a\nb\nc\n"}),
    Case("edit falls back to a tolerant match only when it is unique",
         [S("edit", {"path": "q.txt", "old_string": 'say "hi" - now', "new_string": "said"},
            has=("normalising",))],
         files={"q.txt": "we say \u201chi\u201d \u2013 now   \nend\n"}, after={"q.txt": "we said   \nend\n"}),
    Case("edit that changes nothing is an error",
         [S("edit", {"path": "a.txt", "old_string": "same", "new_string": "same"}, error=True, has=("nothing",))],
         files={"a.txt": "same\n"}),
    Case("edit of a missing file says to use write",
         [S("edit", {"path": "no.txt", "old_string": "a", "new_string": "b"}, error=True, has=("not found", "write"))]),

    # -- apply_patch ------------------------------------------------------------------------
    Case("apply_patch envelope adds, updates and deletes",
         [S("apply_patch", {"patch": "*** Begin Patch\n*** Add File: new.txt\n+fresh\n*** Update File: a.py\n@@ def f():\n"
                                     "-    return 1\n+    return 2\n*** Delete File: old.txt\n*** End Patch\n"},
            has=("3 files changed", "A new.txt", "M a.py", "D old.txt"))],
         files={"a.py": "def f():\n    return 1\n", "old.txt": "bye\n"},
         after={"new.txt": "fresh\n", "a.py": "def f():\n    return 2\n", "old.txt": None}),
    Case("apply_patch is all or nothing across files",
         [S("apply_patch", {"patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+ONE\n*** Update File: b.txt\n"
                                     "@@\n keep\n-missing line\n+x\n*** End Patch\n"}, error=True,
            has=("b.txt", "hunk 1", "near line", "missing line", "no file was changed"))],
         files={"a.txt": "one\n", "b.txt": "keep\nother\n"}, after={"a.txt": "one\n", "b.txt": "keep\nother\n"}),
    Case("apply_patch takes a unified diff over two files",
         [S("apply_patch", {"patch": "--- a/x.txt\n+++ b/x.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+B\n"
                                     "--- /dev/null\n+++ b/y.txt\n@@ -0,0 +1 @@\n+why\n"},
            has=("M x.txt", "A y.txt"))],
         files={"x.txt": "a\nb\n"}, after={"x.txt": "a\nB\n", "y.txt": "why\n"}),
    Case("apply_patch moves a file",
         [S("apply_patch", {"patch": "*** Begin Patch\n*** Update File: src.txt\n*** Move to: dst/moved.txt\n@@\n-v1\n+v2\n"
                                     "*** End Patch"}, has=("R src.txt -> dst/moved.txt",))],
         files={"src.txt": "v1\n"}, after={"src.txt": None, "dst/moved.txt": "v2\n"}),
    Case("apply_patch keeps CRLF",
         [S("apply_patch", {"patch": "*** Begin Patch\n*** Update File: w.txt\n@@\n one\n-two\n+2\n*** End Patch"})],
         files={"w.txt": b"one\r\ntwo\r\n"}, after={"w.txt": b"one\r\n2\r\n"}),
    Case("apply_patch into a protected directory is refused",
         [S("apply_patch", {"patch": "*** Begin Patch\n*** Add File: .git/hooks/post-merge\n+x\n*** End Patch"},
            error=True, has=("path is in a protected directory: .git/hooks/post-merge",))],
         files={".git/hooks/README": "x"}, after={".git/hooks/post-merge": None}),

    # -- ls, read_dir, glob, find, grep -----------------------------------------------------
    Case("ls sorts, marks directories and hides dotfiles",
         [S("ls", {}, equals="a.txt\nb/\nc.txt")], files={"c.txt": "", "a.txt": "", "b/x": "", ".hidden": ""}),
    Case("ls depth 2 and show_hidden", [S("ls", {"depth": 2, "show_hidden": True}, equals=".h\nb/\nb/x")],
         files={"b/x": "", ".h": ""}),
    Case("ls of an empty directory", [S("ls", {"path": "empty"}, equals="(empty directory)")], sh="mkdir empty"),
    Case("read_dir answers JSON entries",
         [S("read_dir", {"path": "."}, has=('"path": "a.txt", "type": "file", "size": 3', '"type": "dir"'))],
         files={"a.txt": "abc", "d/x": ""}),
    Case("glob with ** matches at any depth, sorted",
         [S("glob", {"pattern": "**/*.py"}, equals="a.py\nsrc/b.py\nsrc/deep/c.py")],
         files={"a.py": "", "src/b.py": "", "src/deep/c.py": "", "src/n.txt": ""}),
    Case("glob with no match says so", [S("glob", {"pattern": "*.rs"}, has=("no files match",))], files={"a.py": ""}),
    Case("find by substring and type",
         [S("find", {"pattern": "test", "type": "file"}, equals="pkg/test_b.py\ntest_a.py")],
         files={"test_a.py": "", "pkg/test_b.py": "", "pkg/tests/x": ""}),
    Case("grep answers path:line:text, skipping ignored, binary and .git files",
         [S("grep", {"pattern": "needle"}, equals="src/a.py:2:needle here")],
         files={"src/a.py": "x\nneedle here\n", ".gitignore": "build/\n*.log\n", "build/out.py": "needle\n",
                "app.log": "needle\n", "bin.dat": b"needle\x00", ".git/config": "needle", "node_modules/m.js": "needle"}),
    Case("grep context lines use path-line-text",
         [S("grep", {"pattern": "mid", "context": 1}, equals="f.txt-1-top\nf.txt:2:mid\nf.txt-3-bottom")],
         files={"f.txt": "top\nmid\nbottom\n"}),
    Case("grep include, ignore_case and literal",
         [S("grep", {"pattern": "A.B", "include": "*.md", "ignore_case": True, "literal": True},
            equals="doc.md:1:xa.bx")], files={"doc.md": "xa.bx\naxb\n", "code.py": "a.b\n"}),
    Case("grep cuts long lines at 500 characters",
         [S("grep", {"pattern": "needle"}, has=("cut at 500",), check=lambda a: len(a.text) < 700)],
         files={"l.txt": "needle" + "q" * 2000 + "\n"}),
    Case("grep stops at max_results with a notice",
         [S("grep", {"pattern": "hit", "max_results": 3}, has=("f.txt:3:hit", "stopped at 3 matches"),
            lacks=("f.txt:4:",))], files={"f.txt": "hit\n" * 10}),
    Case("grep with no match", [S("grep", {"pattern": "absent"}, equals="no matches found")], files={"a": "b\n"}),
    Case("grep with a broken regular expression suggests literal",
         [S("grep", {"pattern": "foo("}, error=True, has=("invalid regular expression", "literal"))]),

    # -- bash -------------------------------------------------------------------------------
    Case("bash answers the output", [S("bash", {"command": "echo hello"}, equals="hello\n")]),
    Case("bash interleaves stderr", [S("bash", {"command": "echo out; echo err >&2"}, has=("out\nerr",))]),
    Case("bash with no output", [S("bash", {"command": "true"}, equals="(no output)")]),
    Case("bash non-zero exit is an error ending in the exit code",
         [S("bash", {"command": "echo oops; exit 3"}, error=True, equals="oops\nexit code: 3",
            meta={"exit_code": 3})]),
    Case("bash runs in the workspace, or in cwd",
         [S("bash", {"command": "cat marker"}, equals="top\n"), S("bash", {"command": "cat m2", "cwd": "sub"},
                                                                    equals="inner\n")],
         files={"marker": "top\n", "sub/m2": "inner\n"}),
    Case("bash timeout kills the whole tree, grandchildren too",
         [S("bash", {"command": "(sleep 2; touch survived) & (sh -c 'sleep 2; touch survived2' &) ; sleep 30",
                     "timeout": 1}, error=True, has=("timed out after 1s",), meta={"exit_code": 124})],
         settle=2.5, after={"survived": None, "survived2": None}),
    Case("bash turns invalid UTF-8 into U+FFFD",
         [S("bash", {"command": r"printf 'caf\351\n'"}, equals="caf\ufffd\n")]),
    Case("bash accepts cmd and timeout as a string",
         [S("bash", {"cmd": "echo $((6*7))", "timeout": "5"}, equals="42\n")]),

    # -- exec and process -------------------------------------------------------------------
    Case("exec feeds input to stdin", [S("exec", {"command": "tr a-z A-Z", "input": "shout"}, equals="SHOUT")]),
    Case("exec in working_dir", [S("exec", {"command": "pwd", "working_dir": "d"}, match=r"/d\n?$")],
         files={"d/x": ""}),
    Case("exec background answers a pid; process polls, lists and reports the exit",
         [S("exec", {"command": "echo started; sleep 0.3; echo finished", "background": True},
            has=("started background job",), save={"pid": "pid"}),
          S("process", {"action": "list"}, has=("{pid}", "echo started")),
          S("process", {"action": "poll", "pid": "{pid}", "wait": 5}, has=("started",)),
          S("process", {"action": "status", "pid": "{pid}"}, before=1.0,
            has=("exited with code 0", "finished"), meta={"exit_code": 0})]),
    Case("process input reaches a background job's stdin",
         [S("exec", {"command": "read line; echo got:$line", "background": True}, save={"pid": "pid"}),
          S("process", {"action": "input", "pid": "{pid}", "data": "hi\n"}, has=("sent 3 characters",)),
          S("process", {"action": "poll", "pid": "{pid}", "wait": 5}, has=("got:hi",)),
          S("process", {"action": "status", "pid": "{pid}"}, before=0.5, has=("exited with code 0",))]),
    Case("process kill stops a job and its children",
         [S("exec", {"command": "(sleep 3; touch bg-survived) & sleep 60", "background": True}, save={"pid": "pid"}),
          S("process", {"action": "kill", "pid": "{pid}"}, has=("killed job",)),
          S("process", {"action": "status", "pid": "{pid}"}, has=("killed by signal",))],
         settle=3.5, after={"bg-survived": None}),
    Case("process signal reaches the job's process group",
         [S("exec", {"command": "trap 'echo got-term; exit 7' TERM; sleep 30 & wait", "background": True},
            save={"pid": "pid"}),
          S("process", {"action": "signal", "pid": "{pid}", "signal": "TERM"}, before=0.3, has=("sent signal 15",)),
          S("process", {"action": "poll", "pid": "{pid}", "wait": 5}, before=0.5, has=("got-term",))]),
    Case("process with an unknown pid lists the jobs",
         [S("process", {"action": "status", "pid": "999999"}, error=True, has=("no background job",))]),

    # -- git --------------------------------------------------------------------------------
    Case("git in a fresh repository with no identity: add, commit, log, status",
         [S("git_status", {}, has=("No commits yet",)),
          S("git_add", {"files": ["a.txt"]}, has=("staged a.txt", "A  a.txt")),
          S("git_commit", {"message": "first commit"}, has=("first commit", "1 file changed")),
          S("git_log", {"limit": "5"}, has=("first commit",)),
          S("git_diff", {}, equals="(no differences)")],
         files={"a.txt": "hello\n"}, sh="git init -q . && git config --unset-all user.name; "
                                        "git config --unset-all user.email; true"),
    Case("git_diff shows unstaged and staged changes",
         [S("git_diff", {}, has=("-v1", "+v2")), S("git_add", {"files": "f.txt"}),
          S("git_diff", {"staged": True}, has=("+v2",))],
         files={"f.txt": "v1\n"}, sh="git init -q . && git add f.txt && git -c user.name=t -c user.email=t@t commit -qm init"
                                     " && echo v2 > f.txt"),
    Case("git_commit with nothing staged answers git's message",
         [S("git_commit", {"message": "empty"}, error=True, has=("git_commit error:",))], sh="git init -q ."),
    Case("git_status outside a repository",
         [S("git_status", {}, error=True, has=("git_status error:", "not a git repository"))]),

    # -- small tools ------------------------------------------------------------------------
    Case("echo", [S("echo", {"text": "héllo"}, equals="héllo")]),
    Case("echo refuses over 10,000 characters",
         [S("echo", {"text": "x" * 10_001}, error=True, has=("invalid arguments for echo: text",))]),
    Case("get_time is ISO 8601 UTC", [S("get_time", {}, match=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")]),
    Case("memory_search ranks snippets; memory_get reads lines",
         [S("memory_search", {"query": "deploy staging"}, has=("memory/ops.md:1-2", "staging server")),
          S("memory_get", {"path": "memory/ops.md", "from": 2, "lines": 1}, equals="Deploy to the staging server."),
          S("memory_get", {"path": "a.txt"}, error=True, has=("MEMORY.md",))],
         files={"MEMORY.md": "# Notes\nLikes tea.\n", "memory/ops.md": "# Ops\nDeploy to the staging server.\n",
                "a.txt": "x"}),

    # -- validation -------------------------------------------------------------------------
    Case("unknown tool names the tools that exist",
         [S("reed", {"path": "a"}, error=True, has=("unknown tool: reed", "read"))]),
    Case("a missing argument is named", [S("read", {}, error=True, equals="invalid arguments for read: path: Field required")]),
    Case("an unknown argument is named",
         [S("read", {"path": "a.txt", "colour": "red"}, error=True, has=("colour: unknown argument",))]),
    Case("a wrong type is named", [S("read", {"path": "a.txt", "offset": "two"}, error=True, has=("offset:",))]),

    # -- network ----------------------------------------------------------------------------
    Case("http_fetch answers status, type, size and readable HTML",
         [S("http_fetch", {"url": "{base}/page"},
            has=("status: 200", "content-type: text/html", "bytes: ", "# Welcome", "Some bold text.", "- one"),
            lacks=("var x", "<p>"), meta={"status": 200, "truncated": False})],
         net="server", routes={"/page": (200, {"Content-Type": "text/html; charset=utf-8"}, HTML)}),
    Case("http_fetch follows redirects and says where it landed",
         [S("http_fetch", {"url": "{base}/old"}, has=("url: {base}/new", "after 1 redirect", "moved here"))],
         net="server", routes={"/old": (302, {"Location": "/new"}, b""),
                               "/new": (200, {"Content-Type": "text/plain"}, b"moved here")}),
    Case("http_fetch cuts at max_bytes and says so",
         [S("http_fetch", {"url": "{base}/big", "maxBytes": "100"}, has=("cut at max_bytes 100",),
            meta={"truncated": True, "bytes": 100})],
         net="server", routes={"/big": (200, {"Content-Type": "text/plain"}, b"x" * 5000)}),
    Case("http_fetch of a 404 is an error that shows the status",
         [S("http_fetch", {"url": "{base}/missing"}, error=True, has=("status: 404",))], net="server"),
    Case("web_fetch answers readable text", [S("web_fetch", {"url": "{base}/page"}, has=("# Welcome",))],
         net="server", routes={"/page": (200, {"Content-Type": "text/html"}, HTML)}),
    Case("http_fetch refuses a host that is not listed",
         [S("http_fetch", {"url": "http://127.0.0.2:9/"}, error=True, has=("not in the policy's network allowlist",))],
         net="server"),
    Case("http_fetch never reaches the metadata address, listed or not",
         [S("http_fetch", {"url": "http://169.254.169.254/latest/meta-data/"}, error=True,
            has=("not in the policy's network allowlist",))], net="server"),
    Case("http_fetch refuses other headers",
         [S("http_fetch", {"url": "{base}/page", "headers": {"Authorization": "x"}}, error=True,
            has=("headers:", "Authorization"))], net="server"),
    Case("network mode none refuses before any connection",
         [S("http_fetch", {"url": "{trip}"}, error=True, has=("network access is off",)),
          S("web_fetch", {"url": "{trip}"}, error=True, has=("network access is off",)),
          S("web_search", {"query": "anything"}, error=True, has=("search endpoint",))], net="off"),
    Case("http_fetch refuses ftp", [S("http_fetch", {"url": "ftp://example.com/x"}, error=True, has=("http",))],
         net="off"),
]


def _fill(value, env: dict):
    if isinstance(value, str):
        for k, v in env.items():
            value = value.replace("{" + k + "}", str(v))
        return value
    if isinstance(value, dict):
        return {k: _fill(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, env) for v in value]
    return value


def _setup(case: Case, ws) -> None:
    for rel, body in case.files.items():
        p = ws / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            p.write_bytes(body)
        else:
            p.write_bytes(body.encode("utf-8"))
    for rel, mode in case.modes.items():
        os.chmod(ws / rel, mode)
    if case.sh:
        env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
        subprocess.run(["bash", "-c", case.sh], cwd=ws, check=True, env=env, capture_output=True)


def _run(case: Case, ws, call, env: dict) -> None:
    for n, step in enumerate(case.steps, 1):
        if step.before:
            time.sleep(step.before)
        ans = call(step.tool, _fill(step.args, env))
        where = f"step {n} ({step.tool}): {ans.text[:2000]!r} meta={ans.meta}"
        if step.error is not None:
            assert ans.is_error is step.error, where
        if step.equals is not None:
            assert ans.text == _fill(step.equals, env), where
        for s in step.has:
            assert _fill(s, env) in ans.text, f"{s!r} missing in {where}"
        for s in step.lacks:
            assert _fill(s, env) not in ans.text, f"{s!r} present in {where}"
        if step.match:
            assert re.search(step.match, ans.text), where
        for k, v in step.meta.items():
            assert ans.meta.get(k) == v, f"meta {k}: {ans.meta.get(k)!r} != {v!r} in {where}"
        for var, key in step.save.items():
            env[var] = ans.meta[key]
        if step.check is not None:
            step.check(ans)
    if case.settle:
        time.sleep(case.settle)
    for rel, want in case.after.items():
        p = ws / rel
        if want is None:
            assert not p.exists(), f"{rel} should not exist"
        else:
            want = want.encode("utf-8") if isinstance(want, str) else want
            assert p.read_bytes() == want, rel
    for rel, mode in case.after_modes.items():
        assert (os.stat(ws / rel).st_mode & 0o7777) == mode, rel


def _cases(net: Optional[str]) -> list:
    return [pytest.param(c, id=c.id) for c in CASES if c.net == net]


@pytest.mark.parametrize("case", _cases(None))
def test_tool(case, workspace, call):
    _setup(case, workspace)
    _run(case, workspace, call, {})


@pytest.mark.parametrize("case", _cases("server"))
def test_tool_with_network(case, workspace, http_server, call):
    http_server.routes.update(case.routes)
    _setup(case, workspace)
    _run(case, workspace, call, {"base": http_server.base})


@pytest.mark.parametrize("case", _cases("off"))
def test_tool_without_network(case, workspace, tripwire, call):
    _setup(case, workspace)
    _run(case, workspace, call, {"trip": tripwire.url})
    assert not tripwire.connected(), "a refused fetch still connected"



