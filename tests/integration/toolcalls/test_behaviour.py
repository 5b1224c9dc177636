"""One table of tool behaviours (TOOLS.md's edge cases), run on local and docker alike."""
from __future__ import annotations

import base64
import json
import struct
import subprocess
import tracemalloc
import zlib

import pytest

PNG = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
       + struct.pack(">I", zlib.crc32(b"IHDR" + struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))))


def ok(res):
    assert not res.is_error, res.text
    return res.text


def bad(res):
    assert res.is_error, res.text
    return res.text


# -- read -----------------------------------------------------------------------------------------
def test_read_numbers_lines_and_pages(call, workspace):
    (workspace / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 2501)))
    text = ok(call("read", {"path": "a.txt"}))
    assert text.startswith("     1\tline 1\n") and "  2000\tline 2000" in text and "line 2001" not in text
    assert "continue with offset 2001" in text
    text = ok(call("read", {"path": "@a.txt", "offset": "2499"}))
    assert text == "  2499\tline 2499\n  2500\tline 2500"
    assert ok(call("read", {"file_path": "a.txt", "offset": 10, "limit": 2})).startswith("    10\tline 10\n    11\tline 11")


def test_read_offset_past_the_end(call, workspace):
    (workspace / "a.txt").write_text("one\ntwo\n")
    assert bad(call("read", {"path": "a.txt", "offset": 9})) == "offset 9 is past the end: a.txt has 2 lines"


def test_read_binary_is_refused_with_its_size(call, workspace):
    (workspace / "b.bin").write_bytes(b"\x00\x01\x02" * 100)
    text = bad(call("read", {"path": "b.bin"}))
    assert "binary" in text and "300 bytes" in text


def test_read_image_is_an_image_block(call, workspace):
    (workspace / "p.png").write_bytes(PNG)
    res = call("read", {"path": "p.png"})
    assert not res.is_error and isinstance(res.content, list)
    img = [b for b in res.content if b.type == "image"][0]
    assert img.media_type == "image/png" and base64.b64decode(img.data) == PNG


def test_read_a_line_longer_than_a_page(call, workspace):
    (workspace / "long.txt").write_text("x" * 80_000 + "\nshort\n")
    text = bad(call("read", {"path": "long.txt"}))
    assert "longer than a page" in text and "sed -n '1p'" in text
    assert ok(call("read", {"path": "long.txt", "offset": 2})) == "     2\tshort"


def test_read_missing_and_directory(call, workspace):
    (workspace / "dir").mkdir()
    assert "file not found: nope.txt" in bad(call("read", {"path": "nope.txt"}))
    assert "is a directory" in bad(call("read", {"path": "dir"}))


def test_a_bad_path_is_a_validation_error_and_the_sandboxs_word_only_a_contract_type(call, workspace, monkeypatch):
    """The README's contract: a path outside the workspace is `validation` (it was `execution`,
    the agent's refusals carried no type); a type the sandbox names outside the contract is
    `execution`, and a result that is no error carries none."""
    from runner.controller import core

    for tool, args in (("read", {"path": "../x"}), ("read", {"path": "/etc/passwd"}), ("ls", {"path": "/"}),
                       ("write", {"path": "/tmp/x", "content": "1"}), ("read", {"path": "a\x00b"})):
        res = call(tool, args)
        assert res.is_error and res.meta["error_type"] == "validation", (tool, args, res.text, res.meta)
    assert call("read", {"path": "nope.txt"}).meta["error_type"] == "execution"  # the tool ran: no such file
    composed = core.Runner._compose(None, {"content": "x", "is_error": True, "meta": {"error_type": "root"}}, None)
    assert composed.meta["error_type"] == "execution"
    composed = core.Runner._compose(None, {"content": "x", "meta": {"error_type": "gated"}}, None)
    assert "error_type" not in composed.meta and not composed.is_error


def test_read_invalid_utf8_becomes_replacement_chars(call, workspace):
    (workspace / "u.txt").write_bytes(b"caf\xe9 ok\n")
    assert ok(call("read", {"path": "u.txt"})) == "     1\tcaf\ufffd ok"


# -- write / edit ----------------------------------------------------------------------------------
def test_write_creates_parents_and_keeps_mode(call, workspace):
    assert ok(call("write", {"path": "x/y/z.txt", "content": "héllo"})) == "wrote 6 bytes to x/y/z.txt"
    f = workspace / "x/y/z.txt"
    f.chmod(0o751)
    ok(call("write", {"path": "x/y/z.txt", "content": "again"}))
    assert f.read_text() == "again" and f.stat().st_mode & 0o777 == 0o751


def test_edit_keeps_crlf_and_bom(call, workspace):
    f = workspace / "w.txt"
    f.write_bytes(b"\xef\xbb\xbfone\r\ntwo\r\nthree\r\n")
    text = ok(call("edit", {"path": "w.txt", "old_string": "two\nthree", "new_string": "2\n3"}))
    assert "-two" in text and "+2" in text
    assert f.read_bytes() == b"\xef\xbb\xbfone\r\n2\r\n3\r\n"


def test_edit_ambiguous_missing_and_no_change(call, workspace):
    (workspace / "e.txt").write_text("a = 1\na = 1\nb = 2\n")
    assert "found 2 times" in bad(call("edit", {"path": "e.txt", "old_string": "a = 1", "new_string": "a = 3"}))
    assert "not found" in bad(call("edit", {"path": "e.txt", "old_string": "c = 9", "new_string": "c = 1"}))
    assert "same" in bad(call("edit", {"path": "e.txt", "old_string": "b = 2", "new_string": "b = 2"}))
    ok(call("edit", {"path": "e.txt", "oldText": "a = 1", "newText": "a = 3", "replace_all": True}))
    assert (workspace / "e.txt").read_text() == "a = 3\na = 3\nb = 2\n"


def test_edit_tolerant_match_only_when_exact_is_absent(call, workspace):
    (workspace / "q.py").write_text("print(\u201chello\u201d)   \nx = 1\n")
    text = ok(call("edit", {"path": "q.py", "old_string": 'print("hello")\nx = 1', "new_string": "print('hi')\nx = 2"}))
    assert "normalising" in text
    assert (workspace / "q.py").read_text() == "print('hi')\nx = 2\n"


def test_multi_edits_are_all_or_nothing(call, workspace):
    f = workspace / "m.txt"
    f.write_text("alpha\nbeta\ngamma\n")
    res = call("edit", {"path": "m.txt", "edits": [{"old_string": "alpha", "new_string": "A"},
                                                    {"old_string": "missing", "new_string": "M"}]})
    assert "edit 2 of 2" in bad(res) and f.read_text() == "alpha\nbeta\ngamma\n"
    ok(call("edit", {"path": "m.txt", "edits": [{"old_string": "alpha", "new_string": "A"},
                                                {"oldText": "gamma", "newText": "G"}]}))
    assert f.read_text() == "A\nbeta\nG\n"


# -- apply_patch ----------------------------------------------------------------------------------
def test_envelope_patch_over_several_files(call, workspace):
    (workspace / "a.py").write_text("def f():\n    return 1\n")
    (workspace / "old.txt").write_text("bye\n")
    (workspace / "mv.txt").write_text("keep\nme\n")
    patch = ("*** Begin Patch\n*** Update File: a.py\n@@ def f():\n-    return 1\n+    return 2\n"
             "*** Add File: new/b.txt\n+hello\n+world\n*** Delete File: old.txt\n"
             "*** Update File: mv.txt\n*** Move to: moved.txt\n@@\n keep\n-me\n+you\n*** End Patch\n")
    text = ok(call("apply_patch", {"patch": patch}))
    assert "4 files" in text
    assert (workspace / "a.py").read_text() == "def f():\n    return 2\n"
    assert (workspace / "new/b.txt").read_text() == "hello\nworld\n"
    assert not (workspace / "old.txt").exists() and not (workspace / "mv.txt").exists()
    assert (workspace / "moved.txt").read_text() == "keep\nyou\n"


def test_unified_diff_patch(call, workspace):
    (workspace / "u.txt").write_text("1\n2\n3\n4\n")
    diff = "--- a/u.txt\n+++ b/u.txt\n@@ -2,2 +2,2 @@\n 2\n-3\n+three\n"
    ok(call("apply_patch", {"patch": diff}))
    assert (workspace / "u.txt").read_text() == "1\n2\nthree\n4\n"


def test_multi_file_patch_is_all_or_nothing(call, workspace):
    (workspace / "one.txt").write_text("one\n")
    (workspace / "two.txt").write_text("two\n")
    patch = ("*** Begin Patch\n*** Update File: one.txt\n@@\n-one\n+ONE\n"
             "*** Update File: two.txt\n@@\n-not there\n+X\n*** End Patch\n")
    text = bad(call("apply_patch", {"patch": patch}))
    assert "two.txt, hunk 1" in text and "did not match near line" in text
    assert (workspace / "one.txt").read_text() == "one\n"


# -- listing and search ----------------------------------------------------------------------------
def test_grep_shows_no_line_past_the_last(call, workspace):
    """A file's closing newline ends its last line: context after a match there, or `^$`, showed
    a line N+1 that the file does not have."""
    (workspace / "a.txt").write_text("a\nneedle b\n")
    (workspace / "e.txt").write_text("x\n\ny\n")
    assert call("grep", {"pattern": "needle", "context": 1}).text == "a.txt-1-a\na.txt:2:needle b"
    assert call("grep", {"pattern": "^$"}).text == "e.txt:2:"
    (workspace / "n.txt").write_text("needle, no newline")
    assert call("grep", {"pattern": "needle", "context": 2, "path": "n.txt"}).text == "n.txt:1:needle, no newline"


def test_ls_glob_find_grep(call, workspace):
    (workspace / "src/pkg").mkdir(parents=True)
    (workspace / "src/pkg/m.py").write_text("import os\nTODO = 1\n")
    (workspace / "src/x.js").write_text("// TODO later\n")
    (workspace / ".hidden").write_text("")
    (workspace / "node_modules").mkdir()
    (workspace / "node_modules/dep.js").write_text("TODO in a dependency\n")
    (workspace / "build").mkdir()
    (workspace / "build/out.py").write_text("TODO built\n")
    (workspace / ".gitignore").write_text("build/\n")
    (workspace / "empty").mkdir()
    assert ok(call("ls", {"path": "."})) == "build/\nempty/\nnode_modules/\nsrc/"
    assert ".hidden" in ok(call("ls", {"path": ".", "show_hidden": True}))
    assert ok(call("ls", {"path": "empty"})) == "(empty directory)"
    assert ok(call("ls", {"path": "src", "depth": 2})) == "pkg/\n  m.py\nx.js"
    entries = json.loads(ok(call("read_dir", {"path": "src"})))
    assert {"path": "src/x.js", "type": "file", "size": 14} in entries
    assert ok(call("glob", {"pattern": "**/*.py"})) == "build/out.py\nsrc/pkg/m.py"
    assert ok(call("find", {"pattern": "pkg", "type": "dir"})) == "src/pkg/"
    assert ok(call("grep", {"pattern": "TODO"})) == "src/pkg/m.py:2:TODO = 1\nsrc/x.js:1:// TODO later"
    assert ok(call("grep", {"pattern": "todo", "ignore_case": True, "include": "*.py"})) == "src/pkg/m.py:2:TODO = 1"
    assert ok(call("grep", {"pattern": "import", "context": 1})) == "src/pkg/m.py:1:import os\nsrc/pkg/m.py-2-TODO = 1"
    assert ok(call("grep", {"pattern": "nothing-like-this"})) == "no matches found"
    assert "bad regular expression" in bad(call("grep", {"pattern": "("}))


# -- processes ---------------------------------------------------------------------------------------
def test_bash_output_exit_code_and_no_output(call):
    assert ok(call("bash", {"command": "echo out; echo err >&2"})) == "out\nerr\n"
    assert bad(call("bash", {"command": "echo partial; exit 3"})) == "partial\nexit code: 3"
    assert ok(call("bash", {"command": "true"})) == "(no output)"


def test_bash_timeout_kills_grandchildren(call):
    res = call("bash", {"command": "(sleep 61.5; echo late) & sleep 61.5 & sleep 61.5; echo never", "timeout": "1"})
    assert "timed out after 1s" in bad(res) and "never" not in res.text
    assert res.meta["timed_out"] and res.meta["exit_code"] == 124
    assert "61.5" not in ok(call("bash", {"command": "ps -eo args | grep -v grep | grep 'sleep 61.5' || true"}))


def test_bash_invalid_utf8_becomes_replacement_chars(call):
    assert ok(call("bash", {"command": r"printf 'caf\351 \377ok\n'"})) == "caf\ufffd \ufffdok\n"


def test_bash_truncates_long_output_and_keeps_it_all(call):
    res = call("bash", {"command": "seq 1 5000"})
    text = ok(res)
    assert text.startswith("1\n2\n") and text.endswith("4999\n5000\n") and "cut from the middle" in text
    assert res.meta["truncated"] and res.meta["output_lines"] == 5000
    page = ok(call("result", {"call_id": res.meta["call_id"], "offset": 2500, "limit": 3}))
    assert page.startswith("2500\n2501\n2502\n")


def test_a_100mb_flood_keeps_the_controller_flat(call):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        res = call("bash", {"command": "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 100000000"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.meta["output_chars"] == 100_000_000 and res.meta["truncated"]
    assert peak < 24 * 1024 * 1024, f"controller peak {peak / 2**20:.1f} MiB"


def test_exec_foreground_with_input_and_background_jobs(call):
    assert ok(call("exec", {"command": "tr a-z A-Z", "input": "shout\n"})) == "SHOUT\n"
    res = call("exec", {"command": "echo started; while read l; do echo got $l; done", "background": True})
    pid = res.meta["pid"]
    assert f"pid {pid}" in ok(res)
    ok(call("process", {"action": "input", "pid": pid, "data": "ping\n"}))
    for _ in range(50):
        out = ok(call("process", {"action": "poll", "pid": str(pid)}))
        if "got ping" in out:
            break
        call("bash", {"command": "sleep 0.1"})
    assert "started" in out and "got ping" in out and "running" in out
    assert str(pid) in ok(call("process", {"action": "list"}))
    ok(call("process", {"action": "signal", "pid": pid, "signal": "TERM"}))
    for _ in range(50):
        st = call("process", {"action": "status", "pid": pid})
        if not st.meta.get("running"):
            break
        call("bash", {"command": "sleep 0.1"})
    assert "exited" in st.text
    assert "no background job" in bad(call("process", {"action": "poll", "pid": 999999}))


# -- git -------------------------------------------------------------------------------------------
def test_git_in_a_fresh_repository(call, workspace):
    ok(call("bash", {"command": "git init -q -b main"}))
    (workspace / "f.txt").write_text("v1\n")
    assert "?? f.txt" in ok(call("git_status", {}))
    assert "added 1 path" in ok(call("git_add", {"files": ["f.txt"]}))
    assert "first commit" in ok(call("git_commit", {"message": "first commit"}))
    (workspace / "f.txt").write_text("v2\n")
    assert "+v2" in ok(call("git_diff", {}))
    assert ok(call("git_log", {"limit": 5})).endswith(": first commit")
    assert bad(call("git_push", {})).startswith("git_push error:")
    owner = subprocess.run(["stat", "-c", "%u", str(workspace / ".git" / "HEAD")], capture_output=True, text=True)
    assert owner.stdout.strip() == str(workspace.stat().st_uid)


# -- small tools, validation, network -------------------------------------------------------------------
def test_small_tools_and_memory(call, workspace):
    assert ok(call("echo", {"text": "hi"})) == "hi"
    assert ok(call("get_time", {})).endswith("Z")
    (workspace / "MEMORY.md").write_text("# Notes\n\nThe deploy key lives in vault.\n\nUnrelated line.\n")
    assert "MEMORY.md:3-3" in ok(call("memory_search", {"query": "deploy key"}))
    assert ok(call("memory_get", {"path": "MEMORY.md", "from": 3, "lines": 1})) == "The deploy key lives in vault."


@pytest.mark.parametrize("tool, args, says", [
    ("read", {}, "path: Field required"),
    ("read", {"path": "a", "offset": "two"}, "offset"),
    ("read", {"path": "a", "bogus": 1}, "bogus: unexpected argument"),
    ("bash", {"command": 5}, "command"),
    ("ls", {"depth": 9}, "depth"),
    ("nope", {}, "unknown tool: nope"),
])
def test_bad_arguments_name_the_argument(call, tool, args, says):
    assert says in bad(call(tool, args))


def test_network_is_refused_when_the_policy_says_none(call):
    text = bad(call("http_fetch", {"url": "http://127.0.0.1:9/"}))
    assert "network access is off" in text and "not contacted" in text


def test_megabyte_arguments_and_the_next_call(call, workspace):
    ok(call("write", {"path": "big.txt", "content": "y" * 3_000_000}))
    assert (workspace / "big.txt").stat().st_size == 3_000_000
    assert ok(call("echo", {"text": "still fine"})) == "still fine"
